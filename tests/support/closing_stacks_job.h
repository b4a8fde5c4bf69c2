// ClosingStacksJob: the closing-job stacks test (agent/closing_stacks.h) for every multi-node
// backend (tests/multinode: c10d; tests/etcd: etcd-v3), and the agent files it reads.
//
// Contract
//   - The job: two nodes x 4 Python ranks (script(), run by PYTHON_EXEC=/usr/bin/python3: env()),
//     every rank printing "ready rank=R pid=P" from inside the function it then waits in: rank 6
//     in hang_elsewhere(), the others in stuck_here(); SIGUSR1 makes a rank exit 3.
//   - flags(tag, capture_timeout): --capture-timeout (4 s unless given), --log-dir <dir>/<tag>, the
//     jsonl event log <dir>/events<tag>.jsonl (tag: a name for the agent, e.g. its host), to add
//     to the backend's flags (--max-restarts 0).
//   - check(node0, tag0, node1, tag1, failing_rank), with node rank 0's and 1's agents: waits
//     for the 8 ready lines, SIGSTOPs rank 7 (its Python dump never comes: node 1's capture takes
//     half its bound, long after node rank 0's workers are gone), SIGUSR1s `failing_rank` (0 or
//     4), and checks (Catch2) that both agents exit 3 and that node rank 0's report has both
//     nodes' groups with rank 6 the odd one out, no missing node, and the events of node 1's
//     capture and node rank 0's gathering.
//   - The bound: agents started with flags(tag, "2") running the test worker with
//     bound_worker_args(), two ranks a node. check_bound(node0, tag0, node1) stops node rank 1's
//     agent (SIGSTOP) and makes rank 0 fail: node rank 0 must name node 1 as sending no stacks
//     within --capture-timeout + 2 s of the close, in its report and its stacks_gathered event,
//     and exit 3 once node 1's agent is gone (SIGKILLed here).
//   - ready_pid_of(), run_report(), events_named(): as their comments say.
//
// Threading
//   Use from the test's thread.
#pragma once

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/cluster.h"
#include "tests/support/temp_dir.h"

namespace crun::test {

// The pid a worker printed in its "ready rank=R pid=P" line, -1 when none.
inline int ready_pid_of(const std::string& out, int rank) {
  for (const auto& line : lines(out)) {
    int r = -1, pid = -1;
    if (std::sscanf(line.c_str(), "ready rank=%d pid=%d", &r, &pid) == 2 && r == rank) return pid;
  }
  return -1;
}

// The failure_report.json of the one run under `log_dir` (null when there is none).
inline nlohmann::json run_report(const std::string& log_dir) {
  for (const auto& run : std::filesystem::directory_iterator(log_dir)) {
    const auto file = run.path() / "failure_report.json";
    if (std::filesystem::exists(file)) return nlohmann::json::parse(read_file(file.string()));
  }
  return nullptr;
}

// The events named `name` of a jsonl event log.
inline std::vector<nlohmann::json> events_named(const std::string& path, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines(read_file(path))) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j["event"] == name) out.push_back(std::move(j));
  }
  return out;
}

struct ClosingStacksJob {
  TempDir dir{"crun-closing-stacks"};

  ClosingStacksJob() {
    std::ofstream f(script());
    f << "import os, signal, time\n"
         "rank = int(os.environ['RANK'])\n"
         "def stuck_here():\n"
         "    print('ready rank=%d pid=%d' % (rank, os.getpid()), flush=True); time.sleep(3600)\n"
         "def hang_elsewhere():\n"
         "    print('ready rank=%d pid=%d' % (rank, os.getpid()), flush=True); time.sleep(3600)\n"
         "signal.signal(signal.SIGUSR1, lambda *_: os._exit(3))\n"
         "if rank == 6:\n"
         "    hang_elsewhere()\n"
         "stuck_here()\n";
  }
  std::string script() const { return (dir.path / "hung.py").string(); }
  static std::vector<std::string> env() { return {"PYTHON_EXEC=/usr/bin/python3"}; }
  std::string log_dir(const std::string& tag) const { return (dir.path / tag).string(); }
  std::string events(const std::string& tag) const { return (dir.path / ("events" + tag + ".jsonl")).string(); }
  std::vector<std::string> flags(const std::string& tag, const std::string& capture_timeout = "4") const {
    return {"--capture-timeout", capture_timeout, "--log-dir", log_dir(tag), "--event-log-handler", "jsonl:" + events(tag)};
  }
  static std::vector<std::string> bound_worker_args() {
    return {"--hang-in-named-function", "--only-rank", "0", "--fail-on-signal", "SIGUSR1", "--exit", "3"};
  }

  void check(ChildProcess& a, const std::string& tag0, ChildProcess& b, const std::string& tag1, int failing_rank) const {
    using namespace std::chrono_literals;
    INFO("rank " << failing_rank << " fails");
    REQUIRE(a.wait_for_stdout("ready rank=", 4, 60s));
    REQUIRE(b.wait_for_stdout("ready rank=", 4, 60s));
    const int stopped = ready_pid_of(b.out(), 7), failing = ready_pid_of((failing_rank < 4 ? a : b).out(), failing_rank);
    REQUIRE(stopped > 0);
    REQUIRE(failing > 0);
    REQUIRE(::kill(stopped, SIGSTOP) == 0);
    REQUIRE(::kill(failing, SIGUSR1) == 0);
    const auto a_code = a.wait_exit(60s);
    const auto b_code = b.wait_exit(60s);
    INFO(a.err() << "\n--- node rank 1:\n" << b.err());
    CHECK(a_code == 3);
    CHECK(b_code == 3);
    const auto report = run_report(log_dir(tag0));
    INFO(report.dump());
    REQUIRE(report.is_object());
    const auto& groups = report["stack_groups"];
    REQUIRE(groups.is_object());
    CHECK(groups["rank_count"] == 7);  // the failing rank had exited
    REQUIRE(groups["groups"].size() == 3);
    CHECK(groups["groups"][0]["ranks"] == nlohmann::json::parse(failing_rank == 0 ? "[[1,5]]" : "[[0,3],[5,5]]"));  // both nodes'
    CHECK(groups["groups"][0]["summary"].get<std::string>().find("stuck_here") == 0);
    CHECK(groups["groups"][1]["ranks"] == nlohmann::json::parse("[[6,6]]"));
    CHECK(groups["groups"][1]["odd_one_out"] == true);
    CHECK(groups["groups"][1]["summary"].get<std::string>().find("hang_elsewhere") == 0);
    CHECK(groups["groups"][2]["ranks"] == nlohmann::json::parse("[[7,7]]"));
    CHECK(groups["groups"][2]["error"].get<std::string>().find("timed out") != std::string::npos);
    CHECK(!report.contains("stacks_missing_nodes"));
    CHECK_THAT(a.err(), Catch::Contains("crun:     rank 6 (the odd one out): hang_elsewhere"));
    // The events: node 1's capture (rank 7's part timed out), node rank 0's final merge.
    const auto captured = events_named(events(tag1), "stacks_captured");
    REQUIRE(captured.size() == 1);
    CHECK(captured[0]["ranks"] == nlohmann::json::parse(failing_rank == 4 ? "[5,6,7]" : "[4,5,6,7]"));
    CHECK(captured[0]["timed_out"] == nlohmann::json::parse("[7]"));
    CHECK(captured[0]["ms"].get<int>() >= 0);
    const auto gathered = events_named(events(tag0), "stacks_gathered");
    REQUIRE(gathered.size() == 1);
    CHECK(gathered[0]["nodes_in"] == nlohmann::json::parse("[0,1]"));
    CHECK(gathered[0]["nodes_missing"] == nlohmann::json::array());
    CHECK(gathered[0]["ranks"] == 7);
  }

  void check_bound(ChildProcess& a, const std::string& tag0, ChildProcess& b) const {
    using namespace std::chrono_literals;
    REQUIRE(a.wait_for_stdout("ready rank=", 2));
    REQUIRE(b.wait_for_stdout("ready rank=", 2));
    const int failing = ready_pid_of(a.out(), 0);
    REQUIRE(failing > 0);
    REQUIRE(::kill(b.pid(), SIGSTOP) == 0);
    const auto failed_at = std::chrono::steady_clock::now();
    REQUIRE(::kill(failing, SIGUSR1) == 0);
    const bool named = err_has(a, "no stacks before the kill came from node rank(s) 1 within", 30s);
    const auto took = std::chrono::steady_clock::now() - failed_at;
    ::kill(b.pid(), SIGKILL);  // c10d: the store's host keeps the store up until the others have left
    const auto a_code = a.wait_exit(60s);
    INFO(a.err());
    REQUIRE(named);
    CHECK(a_code == 3);
    // The close within moments of the failure, then 2 s + 2 s at most: never the 30 s a wait would take.
    CHECK(took < 15s);
    const auto report = run_report(log_dir(tag0));
    INFO(report.dump());
    REQUIRE(report.is_object());
    CHECK(report["stacks_missing_nodes"] == nlohmann::json::parse("[1]"));
    CHECK(report["stack_groups"]["rank_count"] == 1);  // node rank 0's rank 1 alone
    const auto gathered = events_named(events(tag0), "stacks_gathered");
    REQUIRE(gathered.size() == 1);
    CHECK(gathered[0]["nodes_in"] == nlohmann::json::parse("[0]"));
    CHECK(gathered[0]["nodes_missing"] == nlohmann::json::parse("[1]"));
    const auto captured = events_named(events(tag0), "stacks_captured");
    REQUIRE(captured.size() == 1);
    CHECK(captured[0]["ranks"] == nlohmann::json::parse("[1]"));
    CHECK(captured[0]["timed_out"] == nlohmann::json::array());
  }
};

}  // namespace crun::test
