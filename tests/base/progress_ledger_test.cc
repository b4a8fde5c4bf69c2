// ProgressLedger: restarts that do not raise the highest heartbeat step, counted in a row.
#include <catch2/catch.hpp>

#include "base/progress_ledger.h"

using crun::ProgressLedger;

TEST_CASE("a crash loop at the same step stops after `limit` restarts in a row", "[progress_ledger]") {
  ProgressLedger l(3);
  CHECK_FALSE(l.end_attempt(120));  // the first attempt with a step is progress
  CHECK(l.best() == 120);
  CHECK_FALSE(l.end_attempt(120));  // resumed at 100, failed at 120 again
  CHECK_FALSE(l.end_attempt(110));
  CHECK(l.streak() == 2);
  CHECK(l.end_attempt(120));
  CHECK(l.streak() == 3);
}

TEST_CASE("a step beyond every earlier attempt's resets the count", "[progress_ledger]") {
  ProgressLedger l(2);
  CHECK_FALSE(l.end_attempt(50));
  CHECK_FALSE(l.end_attempt(40));
  CHECK_FALSE(l.end_attempt(51));  // progress, by one step
  CHECK(l.streak() == 0);
  CHECK_FALSE(l.end_attempt(51));
  CHECK(l.end_attempt(std::nullopt));  // no beats at all is no progress
  CHECK(l.best() == 51);
}

TEST_CASE("attempts without any heartbeat make no progress; limit 0 never stops", "[progress_ledger]") {
  ProgressLedger l(2);
  CHECK_FALSE(l.end_attempt(std::nullopt));
  CHECK(l.end_attempt(std::nullopt));
  CHECK_FALSE(l.best());
  ProgressLedger off(0);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(off.end_attempt(7));
}
