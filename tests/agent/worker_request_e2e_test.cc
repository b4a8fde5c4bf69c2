// A worker's requests through CRUN_CONTROL_FILE, end to end on one node: the real binary, real
// worker processes writing the file (crun_test_worker --control-line), crun's exit code and lines.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/agent/crun_command.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The one run directory crun made under `log_dir`.
fs::path run_dir_in(const fs::path& log_dir) {
  for (const auto& e : fs::directory_iterator(log_dir)) {
    if (e.is_directory()) return e.path();
  }
  return {};
}

}  // namespace

TEST_CASE("requests: every worker gets its own empty CRUN_CONTROL_FILE in its attempt directory", "[e2e][requests]") {
  TempDir logs;
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--log-dir", logs.path.string()}, {"--print-env"}));
  REQUIRE(p.wait_exit() == 0);
  const fs::path run = run_dir_in(logs.path);
  for (int r = 0; r < 2; ++r) {
    const fs::path file = run / "attempt_0" / std::to_string(r) / "control";
    CHECK(count(p.out(), "ENV rank=" + std::to_string(r) + " CRUN_CONTROL_FILE=" + file.string() + "\n") == 1);
    CHECK(fs::is_regular_file(file));
    CHECK(fs::file_size(file) == 0);
  }
}

TEST_CASE("requests: stop-job: no restart despite --max-restarts 3, crun exits with the rank's code", "[e2e][requests]") {
  TempDir logs;
  const std::string stamp = (logs.path / "stamps").string();
  const std::string events = (logs.path / "events.jsonl").string();
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--log-dir",
                           (logs.path / "run").string(), "--event-log-handler", "jsonl:" + events},
                          {"--stamp", stamp, "--only-rank", "1", "--control-line", "stop-job data corrupt in shard 7",
                           "--exit", "7", "--hang"}));
  REQUIRE(p.wait_exit() == 7);
  const std::string stamps = slurp(stamp);
  INFO(p.err());
  CHECK(count(stamps, "start restart=0 rank=1 ") == 1);
  CHECK(count(stamps, "start restart=1") == 0);
  const std::regex asked(R"(crun: rank 1 \(local rank 1, pid \d+\) asks crun to stop the job \(stop-job\): data corrupt in shard 7\n)");
  const std::string err = p.err();
  CHECK(std::distance(std::sregex_iterator(err.begin(), err.end(), asked), std::sregex_iterator()) == 1);
  CHECK(count(p.err(), "worker failed (root cause): rank 1 ") == 1);
  CHECK(count(p.err(), "no restart: the worker asked for none") == 1);
  CHECK(count(p.err(), "request (CRUN_CONTROL_FILE): stop-job data corrupt in shard 7") == 1);
  CHECK(count(p.err(), "restarting the group") == 0);
  // The event, and the request in the failure report.
  const std::string log = slurp(events);
  CHECK(count(log, R"("event":"worker_request")") == 1);
  CHECK(count(log, R"("reason":"data corrupt in shard 7")") == 1);
  CHECK(count(log, R"("request":"stop-job")") == 1);
  const std::string report = slurp(run_dir_in(logs.path / "run") / "failure_report.json");
  CHECK(count(report, R"("request": "stop-job data corrupt in shard 7")") == 1);
}

TEST_CASE("requests: stop-job from a worker that exits 0 stops the others and crun exits 0", "[e2e][requests]") {
  TempDir tmp;
  const std::string stamp = (tmp.path / "stamps").string();
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3"},
                          {"--stamp", stamp, "--only-rank", "0", "--control-line", "stop-job converged early", "--exit",
                           "0", "--hang"}));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.err());
  CHECK(count(slurp(stamp), "start restart=1") == 0);
  CHECK(count(p.err(), "asks crun to stop the job (stop-job): converged early") == 1);
  CHECK(count(p.err(), "worker failed") == 0);
}

TEST_CASE("requests: exclude-node on one node: exit 9 with the reason, a worker's exit 0 included", "[e2e][requests]") {
  for (const char* code : {"0", "5"}) {
    SECTION(std::string("the worker exits ") + code) {
      TempDir tmp;
      const std::string stamp = (tmp.path / "stamps").string();
      ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3"},
                              {"--stamp", stamp, "--only-rank", "0", "--control-line", "exclude-node GPU 0 reports XID 79",
                               "--exit", code, "--hang"}));
      REQUIRE(p.wait_exit() == 9);
      INFO(p.err());
      CHECK(count(slurp(stamp), "start restart=1") == 0);
      CHECK(count(p.err(), "asks crun to exclude this node (exclude-node): GPU 0 reports XID 79") == 1);
      CHECK(count(p.err(), "rank 0 asked to exclude this node, and on one node none can take its place: exit 9") == 1);
      CHECK(count(p.err(), "request (CRUN_CONTROL_FILE): exclude-node GPU 0 reports XID 79") == 1);
    }
  }
}

TEST_CASE("requests: an oversized line and an unknown verb: one line each, ignored, the job restarts as usual",
          "[e2e][requests]") {
  TempDir tmp;
  const std::string stamp = (tmp.path / "stamps").string();
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3"},
                          {"--stamp", stamp, "--only-rank", "1", "--fail-before-restart", "1", "--control-line",
                           "stop-job " + std::string(3000, 'x'), "--control-line", "reboot-node now please", "--exit",
                           "3"}));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.err());
  const std::string stamps = slurp(stamp);
  CHECK(count(stamps, "start restart=1") == 2);  // restarted once, as any failure
  CHECK(count(p.err(), "CRUN_CONTROL_FILE line 1: 3009 bytes, over the 1024-byte limit of a line; ignored\n") == 1);
  CHECK(count(p.err(), "CRUN_CONTROL_FILE line 2: unknown request 'reboot-node' (known: exclude-node, stop-job); ignored\n") == 1);
  CHECK(count(p.err(), "asks crun to") == 0);
  CHECK(count(p.err(), "restarting the group") == 1);
}

// --precheck on one node: a smoke test of the runtime among the local ranks (no median to
// compare with, never slow); the workers then start in the same round with restart count 0, and
// the verdict is in the precheck event.
TEST_CASE("precheck: one node runs it once, reports its time, then starts the workers", "[e2e][precheck]") {
  TempDir logs;
  const std::string stamp = (logs.path / "stamps").string();
  const std::string events = (logs.path / "events.jsonl").string();
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--precheck", "--precheck-slowdown", "1.01",
                           "--event-log-handler", "jsonl:" + events},
                          {"--stamp", stamp}));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.err());
  CHECK(count(p.err(), "precheck: node rank 0 ") == 1);
  CHECK_THAT(p.err(), Catch::Contains(" s over 1 node (slow above 1.01x), all_reduce ") && Catch::Contains(": ok\n"));
  const std::string stamps = slurp(stamp);
  CHECK(count(stamps, "start restart=0") == 2);
  CHECK(count(stamps, "start restart=1") == 0);
  const std::string log = slurp(events);
  CHECK(count(log, "\"precheck\"") >= 1);
  CHECK_THAT(log, Catch::Contains("\"verdict\":{"));
}

TEST_CASE("precheck: a bad --precheck-slowdown is one line and exit 2", "[e2e][precheck]") {
  ChildProcess p(crun_cmd({"--standalone", "--precheck", "--precheck-slowdown", "0.5"}, {}));
  CHECK(p.wait_exit() == 2);
  CHECK(p.err() == "crun: error: --precheck-slowdown: expected a number > 1 (at most 1000)\n");
}
