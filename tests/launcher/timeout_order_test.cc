// The timeout stack's order (launcher/timeout_order.h): the check itself, and through
// resolve_launch_plan the flags and variables it reads, each refusal one line naming both sides.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/launch_plan.h"
#include "launcher/timeout_order.h"
#include "tests/launcher/test_host.h"

using namespace crun;
using crun::test::test_host;
using namespace std::chrono_literals;

namespace {

LaunchPlan plan(std::vector<std::string> args, EnvSnapshot env = {}) {
  args.insert(args.begin(), "crun");
  args.insert(args.end(), {"--no-python", "/bin/true"});
  return resolve_launch_plan(args, env, test_host());
}

std::string refusal(std::vector<std::string> args, EnvSnapshot env = {}) {
  try {
    plan(std::move(args), std::move(env));
  } catch (const LaunchUsageError& e) {
    return e.what();
  }
  return "";
}

EnvSnapshot env_of(std::map<std::string, std::string> vars) {
  EnvSnapshot e;
  for (auto& [k, v] : vars) e.vars[k] = v;
  return e;
}

}  // namespace

TEST_CASE("the check: heartbeat and rendezvous liveness below the process group's timeout", "[timeout_order]") {
  TimeoutStack t;
  t.pg = {600s, ""};
  CHECK(check_timeout_order(t).conflict.empty());
  t.heartbeat = TimeoutValue{599s, "--heartbeat-timeout"};
  CHECK(check_timeout_order(t).conflict.empty());
  t.heartbeat->value = 600s;
  const auto c = check_timeout_order(t).conflict;
  CHECK(c.find("--heartbeat-timeout 600 s is not below the process group's timeout, 600 s (torch's default") == 0);
  CHECK(c.find('\n') == std::string::npos);
  t.heartbeat.reset();
  t.rendezvous_liveness = TimeoutValue{900s, "--rdzv-conf heartbeat_timeout"};
  t.pg = {1800s, "--pg-timeout"};
  CHECK(check_timeout_order(t).conflict.empty());
  t.pg.value = 900s;
  CHECK(check_timeout_order(t).conflict.find("--rdzv-conf heartbeat_timeout 900 s is not below the process group's timeout, "
                                             "--pg-timeout 900 s") == 0);
}

TEST_CASE("the check: notes for a slow rendezvous and for NCCL timeouts off", "[timeout_order]") {
  TimeoutStack t;
  t.pg = {600s, ""};
  t.heartbeat = TimeoutValue{10s, "--heartbeat-timeout"};
  t.rendezvous_liveness = TimeoutValue{15s, "--rdzv-conf heartbeat_timeout"};
  t.nccl_timeout_off = true;
  const auto check = check_timeout_order(t);
  CHECK(check.conflict.empty());
  REQUIRE(check.notes.size() == 2);
  CHECK(check.notes[0].find("crun: note: --rdzv-conf heartbeat_timeout 15 s is not below --heartbeat-timeout 10 s") == 0);
  CHECK(check.notes[1].find("NCCL's async error handling and blocking wait are both off") != std::string::npos);
}

TEST_CASE("--heartbeat-timeout against --pg-timeout and torch's default", "[timeout_order]") {
  CHECK(refusal({"--heartbeat-timeout", "900"}).find("--heartbeat-timeout 900 s is not below the process group's timeout, 600 s") == 0);
  CHECK(refusal({"--heartbeat-timeout", "900", "--pg-timeout", "1800"}).empty());
  CHECK(refusal({"--heartbeat-timeout", "60", "--pg-timeout", "30"}) ==
        "--heartbeat-timeout 60 s is not below the process group's timeout, --pg-timeout 30 s: a rank hung outside a collective "
        "must be named by crun before its peers' collectives time out");
  CHECK(refusal({"--heartbeat-timeout", "60"}, env_of({{"PET_PG_TIMEOUT", "45"}})).find("PET_PG_TIMEOUT 45 s") != std::string::npos);
  CHECK(refusal({"--heartbeat-timeout", "60"}, env_of({{"CRUN_PG_TIMEOUT_SEC", "45"}})).find(
            "the process group's timeout, CRUN_PG_TIMEOUT_SEC 45 s") != std::string::npos);
  CHECK(refusal({"--heartbeat-timeout", "auto"}).empty());  // auto stays below it by its ceiling
  CHECK(refusal({"--pg-timeout", "0"}) == "--pg-timeout: expected seconds > 0, got '0'");
  CHECK(refusal({"--heartbeat-timeout", "AUTO"}) == "--heartbeat-timeout: expected seconds >= 0 (0: off) or auto, got 'AUTO'");
  CHECK(refusal({"--heartbeat-timeout", "-1"}) == "--heartbeat-timeout: expected seconds >= 0 (0: off) or auto, got '-1'");
  CHECK(refusal({}, env_of({{"PET_HEARTBEAT_TIMEOUT", "x"}})) ==
        "--heartbeat-timeout: expected seconds >= 0 (0: off) or auto, got 'x' (from PET_HEARTBEAT_TIMEOUT)");
  CHECK(plan({}, env_of({{"PET_HEARTBEAT_TIMEOUT", "auto"}})).heartbeat_auto.value);
  CHECK(refusal({"--pg-timeout", "ten"}) == "--pg-timeout: expected seconds > 0, got 'ten'");
}

TEST_CASE("--pg-timeout and CRUN_PG_TIMEOUT_SEC must agree; the workers get it", "[timeout_order]") {
  CHECK(refusal({"--pg-timeout", "100"}, env_of({{"CRUN_PG_TIMEOUT_SEC", "60"}})) ==
        "--pg-timeout 100 s and CRUN_PG_TIMEOUT_SEC 60 s disagree; the workers read CRUN_PG_TIMEOUT_SEC: give one");
  CHECK(refusal({"--pg-timeout", "60"}, env_of({{"CRUN_PG_TIMEOUT_SEC", "60.0"}})).empty());
  const auto options = to_launch_options(plan({"--pg-timeout", "120", "--heartbeat-timeout", "auto"}));
  REQUIRE(options.agent.pg_timeout);
  CHECK(*options.agent.pg_timeout == 120s);
  CHECK(options.agent.heartbeat_auto);
  CHECK(options.agent.heartbeat_auto_ceiling == 108s);
  CHECK(to_launch_options(plan({"--heartbeat-timeout", "auto"})).agent.heartbeat_auto_ceiling == 540s);
  CHECK_FALSE(to_launch_options(plan({})).agent.pg_timeout);
}

TEST_CASE("multi-node: the rendezvous' liveness against the process group's timeout", "[timeout_order]") {
  const std::vector<std::string> c10d{"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node-a:29400"};
  auto with = [&](std::vector<std::string> more) {
    auto a = c10d;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  CHECK(refusal(with({})).empty());
  CHECK(refusal(with({"--rdzv-conf", "heartbeat_timeout=700"})).find(
            "--rdzv-conf heartbeat_timeout 700 s is not below the process group's timeout, 600 s") == 0);
  CHECK(refusal(with({"--rdzv-conf", "heartbeat_timeout=700", "--pg-timeout", "900"})).empty());
  const auto p = plan(with({"--heartbeat-timeout", "10"}));
  REQUIRE(p.timeout_notes.size() == 1);
  CHECK(p.timeout_notes[0].find("--rdzv-conf heartbeat_timeout 15 s is not below --heartbeat-timeout 10 s") != std::string::npos);
  CHECK(to_launch_options(p).note.find("crun: note: --rdzv-conf heartbeat_timeout 15 s") != std::string::npos);
  const auto learnt = plan(with({"--heartbeat-timeout", "auto"}));
  REQUIRE(learnt.timeout_notes.size() == 1);
  CHECK(learnt.timeout_notes[0].find("auto may learn a value below --rdzv-conf heartbeat_timeout 15 s") != std::string::npos);
  CHECK(plan(with({"--heartbeat-timeout", "30"})).timeout_notes.empty());
}

TEST_CASE("NCCL's switches: two spellings that disagree are refused; both off is a note", "[timeout_order]") {
  CHECK(refusal({}, env_of({{"TORCH_NCCL_BLOCKING_WAIT", "0"}, {"NCCL_BLOCKING_WAIT", "1"}})) ==
        "TORCH_NCCL_BLOCKING_WAIT=0 and NCCL_BLOCKING_WAIT=1 disagree: torch 2.x reads the first, torch 1.x the second; set one, "
        "or both alike");
  CHECK(refusal({}, env_of({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}})).find(
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=3 and NCCL_ASYNC_ERROR_HANDLING=0 disagree") == 0);
  CHECK(refusal({}, env_of({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}, {"NCCL_ASYNC_ERROR_HANDLING", "1"}})).empty());
  CHECK(plan({}, env_of({{"NCCL_ASYNC_ERROR_HANDLING", "0"}})).timeout_notes.size() == 1);
  CHECK(plan({}, env_of({{"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"NCCL_BLOCKING_WAIT", "1"}})).timeout_notes.empty());
  CHECK(plan({}).timeout_notes.empty());
}
