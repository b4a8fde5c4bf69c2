// NCCL flight recorder dumps before the kill, end to end: real crun, real Python workers
// (Debian's /usr/bin/python3) running fake_flight_recorder.py, a test double of torch >= 2.2's
// dump pipe (torch here is 1.13, without one; no GPU), a hang crun detects, the capture.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "tests/agent/failure_report_file.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

// A Python worker that starts the double in the mode FLIGHT_MODES gives its rank, then hangs.
fs::path write_worker(const fs::path& dir) {
  const fs::path script = dir / "hangs.py";
  std::ofstream out(script);
  out << "import os, sys, time\n"
         "sys.path.insert(0, " << std::quoted(CRUN_FAKE_FLIGHT_RECORDER_DIR) << ")\n"
         "import fake_flight_recorder\n"
         "rank = int(os.environ['RANK'])\n"
         "modes = os.environ.get('FLIGHT_MODES', 'dumps').split(',')\n"
         "pipe = fake_flight_recorder.start(modes[rank % len(modes)])\n"
         "print('ready rank=%d pid=%d pipe=%s' % (rank, os.getpid(), pipe), flush=True)\n"
         "\n"
         "def stuck_here():\n"
         "    while True:\n"
         "        time.sleep(100)\n"
         "\n"
         "stuck_here()\n";
  return script;
}

// "took the stacks of N local worker(s) in M ms": M.
long capture_ms(const std::string& err) {
  std::smatch m;
  return std::regex_search(err, m, std::regex(R"(took the stacks of \d+ local worker\(s\) in (\d+) ms)")) ? std::stol(m[1]) : -1;
}

// True when `file` unpickles to the double's dump of `rank`.
bool holds_dump_of(const fs::path& file, int rank) {
  ChildProcess check({"/usr/bin/python3", "-c",
                      "import pickle, sys\n"
                      "d = pickle.load(open(sys.argv[1], 'rb'))\n"
                      "sys.exit(0 if d['version'] == '2.x-test-double' and d['rank'] == int(sys.argv[2]) "
                      "and d['entries'][0]['profiling_name'] == 'nccl:all_reduce' else 1)\n",
                      file.string(), std::to_string(rank)});
  return check.wait_exit(std::chrono::seconds(30)) == 0;
}

std::vector<std::string> python_env(const std::string& modes, std::vector<std::string> more = {}) {
  more.push_back("PYTHON_EXEC=/usr/bin/python3");
  more.push_back("FLIGHT_MODES=" + modes);
  return more;
}

}  // namespace

TEST_CASE("flight recorder: each rank's dump named in the report, whole; a rank without a reader or a dump waits no "
          "longer than the bound",
          "[flight_recorder_e2e]") {
  TempDir dir;
  const fs::path script = write_worker(dir.path);
  const fs::path logs = dir.path / "logs";
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "4", "--initial-heartbeat-timeout", "3", "--capture-timeout", "2", "--log-dir",
                  logs.string(), script.string()},
                 python_env("dumps,dumps,no_reader,never_writes", {"TORCH_NCCL_TRACE_BUFFER_SIZE=2000"}));
  REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
  INFO(p.out() << p.err());
  const auto report = read_report(logs);
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const auto* s = stacks_of(report, rank);
    REQUIRE(s != nullptr);
    REQUIRE(s->contains("flight_recorder"));
    const auto& f = (*s)["flight_recorder"];
    CHECK(f["error"] == "");
    const fs::path file = f["file"].get<std::string>();
    CHECK(file.string().rfind(logs.string() + "/", 0) == 0);
    CHECK(file.string().ends_with("/attempt_0/flight_recorder/nccl_trace_rank_" + std::to_string(rank)));
    REQUIRE(fs::exists(file));
    CHECK(f["bytes"] == fs::file_size(file));  // taken when it was closed, not at its first write
    CHECK(holds_dump_of(file, rank));
    CHECK(p.out().find("ready rank=" + std::to_string(rank) + " pid=") != std::string::npos);
    CHECK((*s)["error"] == "");  // the stacks are whole either way
  }
  const auto* no_reader = stacks_of(report, 2);
  REQUIRE(no_reader != nullptr);
  CHECK((*no_reader)["flight_recorder"]["error"].get<std::string>().rfind("no reader on " + logs.string(), 0) == 0);
  CHECK((*no_reader)["flight_recorder"]["bytes"] == 0);
  const auto* silent = stacks_of(report, 3);
  REQUIRE(silent != nullptr);
  CHECK((*silent)["flight_recorder"]["error"] == "not written within 2 s");
  CHECK((*silent)["flight_recorder"]["bytes"] == 0);
  // The console says where they are; the root cause's line names its dump when it has one.
  CHECK(std::regex_search(p.err(), std::regex("crun: NCCL flight recorder: the dumps of 2 of 4 rank\\(s\\) in " + logs.string() +
                                              "/[^ ]+/attempt_0/flight_recorder; rank 2: no reader on [^;]+; rank 3: not "
                                              "written within 2 s\\n")));
  const long ms = capture_ms(p.err());
  CHECK(ms >= 0);
  CHECK(ms < 2000 + 1500);  // the bound, and the loop's turn after it on a loaded machine: never a wait past it
}

TEST_CASE("flight recorder: a rank whose pipe has no reader is not waited for", "[flight_recorder_e2e]") {
  TempDir dir;
  const fs::path script = write_worker(dir.path);
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "2", "--initial-heartbeat-timeout", "3", "--capture-timeout", "20", "--log-dir",
                  (dir.path / "logs").string(), script.string()},
                 python_env("dumps,no_reader", {"TORCH_NCCL_TRACE_BUFFER_SIZE=2000"}));
  REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
  INFO(p.err());
  CHECK(p.err().find("the dumps of 1 of 2 rank(s)") != std::string::npos);
  const long ms = capture_ms(p.err());
  CHECK(ms >= 0);
  CHECK(ms < 10000);  // half the bound: only a wait for the reader that is not there could reach it
}

TEST_CASE("flight recorder: when crun asks for none, and the user's own dump prefix", "[flight_recorder_e2e]") {
  TempDir dir;
  const fs::path script = write_worker(dir.path);
  const fs::path logs = dir.path / "logs";
  SECTION("off in the workers: no pipe, no line") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", "--log-dir", logs.string(),
                    script.string()},
                   python_env("dumps"));
    REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
    INFO(p.err());
    CHECK(p.out().find("pipe=None") != std::string::npos);
    CHECK(p.err().find("flight recorder") == std::string::npos);
    const auto report = read_report(logs);  // kept: stacks_of points into it
    const auto* s = stacks_of(report, 0);
    REQUIRE(s != nullptr);
    CHECK_FALSE(s->contains("flight_recorder"));
  }
  SECTION("a buffer size that is not a number: one line, none asked for") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", "--log-dir", logs.string(),
                    script.string()},
                   python_env("dumps", {"TORCH_FR_BUFFER_SIZE=lots"}));
    REQUIRE(p.wait_exit(std::chrono::seconds(60)).has_value());
    INFO(p.err());
    CHECK(p.err().find("crun: TORCH_FR_BUFFER_SIZE=lots is not a whole number: no NCCL flight recorder dump before a kill\n") !=
          std::string::npos);
    CHECK(p.out().find("pipe=None") != std::string::npos);
  }
  SECTION("--no-python-stacks: none asked for") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", "--no-python-stacks", "--log-dir",
                    logs.string(), script.string()},
                   python_env("dumps", {"TORCH_NCCL_TRACE_BUFFER_SIZE=2000"}));
    REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
    INFO(p.err());
    CHECK(p.out().find("pipe=None") != std::string::npos);
    CHECK(p.err().find("flight recorder") == std::string::npos);
  }
  SECTION("no --log-dir: the run's folder goes at exit, so none asked for, and one line says so") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", script.string()},
                   python_env("dumps", {"TORCH_NCCL_TRACE_BUFFER_SIZE=2000"}));
    REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
    INFO(p.err());
    CHECK(p.out().find("pipe=None") != std::string::npos);
    CHECK(p.err().find("the NCCL flight recorder is on, but its dumps before a kill need a folder that stays: give --log-dir") !=
          std::string::npos);
  }
  SECTION("the user's TORCH_NCCL_DEBUG_INFO_TEMP_FILE: the dump goes there, even without --log-dir") {
    const std::string prefix = (dir.path / "mine_").string();
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", script.string()},
                   python_env("dumps", {"TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + prefix}));
    REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
    INFO(p.err());
    CHECK(p.err().find("crun: NCCL flight recorder: the dumps of 1 of 1 rank(s) in " + dir.path.string() + "\n") !=
          std::string::npos);
    CHECK(p.err().find("crun:   NCCL flight recorder dump: " + prefix + "0 (") != std::string::npos);
    REQUIRE(fs::exists(prefix + "0"));
    CHECK(holds_dump_of(prefix + "0", 0));
  }
}
