// The restart policy: the progress ledger (restarts that do not raise the highest heartbeat step,
// counted in a row) and the decision a failure leads to, restart or the end of the job.
#include <catch2/catch.hpp>

#include "base/restart_policy.h"

using crun::ProgressLedger;
using crun::RestartDecision;
using crun::decide_after_failure;

TEST_CASE("a crash loop at the same step stops after `limit` restarts in a row", "[restart_policy]") {
  ProgressLedger l(3);
  CHECK_FALSE(l.end_attempt(120));  // the first attempt with a step is progress
  CHECK(l.best() == 120);
  CHECK_FALSE(l.end_attempt(120));  // resumed at 100, failed at 120 again
  CHECK_FALSE(l.end_attempt(110));
  CHECK(l.streak() == 2);
  CHECK(l.end_attempt(120));
  CHECK(l.streak() == 3);
}

TEST_CASE("a step beyond every earlier attempt's resets the count", "[restart_policy]") {
  ProgressLedger l(2);
  CHECK_FALSE(l.end_attempt(50));
  CHECK_FALSE(l.end_attempt(40));
  CHECK_FALSE(l.end_attempt(51));  // progress, by one step
  CHECK(l.streak() == 0);
  CHECK_FALSE(l.end_attempt(51));
  CHECK(l.end_attempt(std::nullopt));  // no beats at all is no progress
  CHECK(l.best() == 51);
}

TEST_CASE("attempts without any heartbeat make no progress; limit 0 never stops", "[restart_policy]") {
  ProgressLedger l(2);
  CHECK_FALSE(l.end_attempt(std::nullopt));
  CHECK(l.end_attempt(std::nullopt));
  CHECK_FALSE(l.best());
  ProgressLedger off(0);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(off.end_attempt(7));
}

TEST_CASE("a failure restarts while restarts remain, counting them", "[restart_policy]") {
  ProgressLedger l(0);
  const auto d = decide_after_failure(0, 3, 1, 10, l);
  CHECK(d.restart());
  CHECK_FALSE(d.no_progress());
  CHECK(d.reason == "restart 1 of 3");
  CHECK(decide_after_failure(2, 3, 1, 10, l).reason == "restart 3 of 3");
  CHECK(crun::restarts_remain(2, 3));
  CHECK_FALSE(crun::restarts_remain(3, 3));
}

TEST_CASE("with no restarts left the job ends with the failure's code and the ledger is untouched", "[restart_policy]") {
  ProgressLedger l(1);
  const auto d = decide_after_failure(3, 3, 137, std::nullopt, l);
  CHECK(d.kind == RestartDecision::Kind::kNoRestartsLeft);
  CHECK(d.exit_code == 137);
  CHECK(d.reason == "no restarts left (max 3)");
  CHECK(l.streak() == 0);  // a limit of 1 would have said "no progress" had the attempt gone in
  CHECK(decide_after_failure(0, 0, 5, 1, l).exit_code == 5);  // --max-restarts 0: the first failure ends it
}

TEST_CASE("restarts that make no progress end the job with kExitNoProgress, before the restarts run out",
          "[restart_policy]") {
  ProgressLedger l(2);
  CHECK(decide_after_failure(0, 10, 1, 100, l).restart());  // the first step seen is progress
  CHECK(decide_after_failure(1, 10, 1, 100, l).restart());  // one in a row without
  const auto d = decide_after_failure(2, 10, 1, 90, l);
  CHECK(d.no_progress());
  CHECK(d.exit_code == crun::kExitNoProgress);
  CHECK(d.reason == "2 restarts in a row made no progress (highest step 100)");
  ProgressLedger silent(1);
  CHECK(decide_after_failure(0, 10, 1, std::nullopt, silent).reason ==
        "1 restart in a row made no progress (highest step none)");
}
