// agent/node_status, agent/operator_view, agent/event_log: the operators' records, metrics text
// and events, without an agent.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "agent/event_log.h"
#include "agent/failure_report.h"
#include "agent/node_status.h"
#include "agent/operator_view.h"
#include "rendezvous/rendezvous_backend.h"
#include "tests/support/temp_dir.h"

using namespace crun;
using nlohmann::json;

namespace {

NodeStatus sample_node(int node_rank, const std::string& id) {
  NodeStatus s;
  s.run_id = "job";
  s.role = "trainer";
  s.hostname = "h" + std::to_string(node_rank);
  s.node_id = id;
  s.addr = "10.0.0." + std::to_string(node_rank + 1);
  s.node_rank = node_rank;
  s.nodes = 2;
  s.world_size = 4;
  s.rendezvous_round = 3;
  s.restart_count = 1;
  s.max_restarts = 2;
  s.state = "running";
  for (int lr = 0; lr < 2; ++lr) {
    WorkerStatus w;
    w.local_rank = lr;
    w.rank = node_rank * 2 + lr;
    w.pid = 100 + w.rank;
    w.state = "running";
    w.restarts = 1;
    if (lr == 0) {
      w.heartbeat_age_s = 0.25;
      w.step = 42;
    }
    s.workers.push_back(w);
  }
  s.updated_unix = 1795659216.5;
  return s;
}


std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("node status: JSON round trip; anything else is refused", "[operator_view]") {
  NodeStatus s = sample_node(1, "h1:7:abc");
  FailureReport r;
  r.rank = 3;
  r.host = "h1";
  r.status = ExitStatus::exited(3);
  r.stderr_tail = {"boom", "\xff not utf-8"};
  s.last_failure = FailureReport::from_json(r.to_json())->to_json();
  s.excluded_nodes = {{"h2:7:b", "h2", "10.0.0.3", "the root cause 2 times", 2, 1795659816.25}};
  s.exclusions_total = 3;
  const auto back = NodeStatus::from_json(s.to_json());
  REQUIRE(back.has_value());
  CHECK(back->workers == s.workers);
  CHECK(back->excluded_nodes == s.excluded_nodes);
  CHECK(back->exclusions_total == 3);
  CHECK(back->node_rank == 1);
  CHECK(json::parse(back->last_failure)["rank"] == 3);
  for (const char* bad : {"", "[]", "{}", "null", "{\"run_id\":1}", "not json"}) CHECK_FALSE(NodeStatus::from_json(bad));
  auto j = json::parse(s.to_json());
  j["workers"][0]["pid"] = "one";
  CHECK_FALSE(NodeStatus::from_json(j.dump()));
  j = json::parse(s.to_json());
  j["last_failure"] = "text";
  CHECK_FALSE(NodeStatus::from_json(j.dump()));
}

TEST_CASE("job_json: this node and the others' newest records, by node rank", "[operator_view]") {
  NodeStatus self = sample_node(0, "a");
  NodeStatus other = sample_node(1, "b");
  NodeStatus older = other;
  older.updated_unix -= 10;
  older.state = "starting";
  NodeStatus stale_self = self;  // our own record read back from the store: ours wins
  stale_self.state = "rendezvous";
  NodeStatus foreign = sample_node(1, "c");
  foreign.run_id = "another-job";
  const auto doc = json::parse(job_json(self, {older.to_json(), "garbage", other.to_json(), stale_self.to_json(), foreign.to_json()}));
  REQUIRE(doc["job"]["nodes"].size() == 2);
  CHECK(doc["job"]["nodes"][0]["node_id"] == "a");
  CHECK(doc["job"]["nodes"][0]["state"] == "running");
  CHECK(doc["job"]["nodes"][1]["node_id"] == "b");
  CHECK(doc["job"]["nodes"][1]["state"] == "running");
  CHECK(doc["job"]["workers"] == 4);
  CHECK(doc["job"]["workers_running"] == 4);
  CHECK(doc["job"]["nodes_seen"] == 2);
  CHECK(doc["job"]["nodes_expected"] == 2);
  CHECK(doc["node"]["node_id"] == "a");
}

TEST_CASE("operator view: health, metrics and status follow what the agent tells it", "[operator_view]") {
  const crun::test::TempDir dir("crun-opview");
  const std::string events_path = (dir.path / "events.jsonl").string();
  OperatorView view({"job \"q\"\n", "trainer", "h\\0", 2, 3}, EventLog::open("jsonl:" + events_path));
  RoundInfo info;
  info.world_size = 2;
  info.master_addr = "127.0.0.1";
  info.master_port = 29500;
  view.round(0, info, "", "");
  view.group_started(0, {11, 12});
  CHECK(view.serve("/healthz").status == 200);
  view.worker_exited(1, 12, ExitStatus::killed(9), false);
  view.watchdog(0, 11, FailureReason::kHang, "no heartbeat");
  view.failure_known(0, 0, ExitStatus::killed(9), false);  // a restart follows: still healthy
  CHECK(view.serve("/healthz").status == 200);
  view.worker_exited(0, 11, ExitStatus::killed(9), true);
  FailureReport report;
  report.rank = 0;
  report.local_rank = 0;
  report.host = "h";
  report.status = ExitStatus::killed(9);
  report.time = std::chrono::system_clock::time_point(std::chrono::seconds(1795659216));
  view.failure(report, true, "");
  info.restart_count = 1;
  view.round(1, info, "", "");
  view.group_started(1, {13, 14});
  const std::string metrics = view.serve("/metrics").body;
  CHECK_THAT(metrics, Catch::Contains("\ncrun_restarts_total 1\n"));
  CHECK_THAT(metrics, Catch::Contains("\ncrun_worker_failures_total{reason=\"hang\"} 1\n"));
  CHECK_THAT(metrics, Catch::Contains("\ncrun_worker_failures_total{reason=\"signal\"} 0\n"));
  CHECK_THAT(metrics, Catch::Contains("\ncrun_workers_running 2\n"));
  CHECK_THAT(metrics, Catch::Contains("\ncrun_last_failure_timestamp_seconds 1795659216\n"));
  // Label values escaped as the exposition format says.
  CHECK_THAT(metrics, Catch::Contains(R"(crun_info{run_id="job \"q\"\n",role="trainer",hostname="h\\0",node_rank="0"} 1)"));
  // Every family has HELP and TYPE before its samples.
  std::istringstream in(metrics);
  std::string line, family;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) family = line.substr(7, line.find(' ', 7) - 7);
    if (line.empty() || line[0] == '#') continue;
    CHECK(line.rfind(family, 0) == 0);
  }
  const auto status = json::parse(view.serve("/status").body);
  CHECK(status["node"]["workers"][0]["pid"] == 13);
  CHECK(status["node"]["workers"][1]["state"] == "running");
  CHECK(status["node"]["last_failure"]["rank"] == 0);
  CHECK(view.serve("/").content_type.rfind("text/html", 0) == 0);
  CHECK(view.serve("/other").status == 404);
  report.restarting = false;
  view.failure(report, false, "node-b");
  const HttpReply health = view.serve("/healthz");
  CHECK(health.status == 503);
  CHECK_THAT(health.body, Catch::StartsWith("failed: rank 0 on h killed by SIGKILL, no restart left (--max-restarts 3)"));
  CHECK_THAT(view.serve("/metrics").body, Catch::Contains("\ncrun_healthy 0\n") &&
                                              Catch::Contains("\ncrun_worker_failures_total{reason=\"hang\"} 1\n"));  // another node's: not counted here
  view.stopped(137);
  std::vector<std::string> kinds;
  std::istringstream events(slurp(events_path));
  while (std::getline(events, line)) kinds.push_back(json::parse(line)["event"]);
  CHECK(kinds == std::vector<std::string>{"rendezvous_round", "worker_start", "worker_start", "worker_exit", "hang", "worker_exit",
                                          "failure", "restart", "rendezvous_round", "worker_start", "worker_start", "failure",
                                          "stop"});
}

TEST_CASE("operator view: a heartbeat reader gives each running worker's age and step", "[operator_view]") {
  OperatorView view({"job", "default", "h", 1, 0}, EventLog::open("null"));
  RoundInfo info;
  view.round(0, info, "", "");
  view.group_started(0, {21});
  CHECK_THAT(view.serve("/metrics").body, !Catch::Contains("crun_worker_heartbeat_age_seconds"));
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::int64_t ns = static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec - 1500000000;
  view.set_heartbeats([ns](int) { return std::optional<Heartbeat>(Heartbeat{7, ns}); });
  const auto w = json::parse(view.serve("/status").body)["node"]["workers"][0];
  CHECK(w["step"] == 7);
  CHECK(w["heartbeat_age_s"].get<double>() >= 1.5);
  CHECK(w["heartbeat_age_s"].get<double>() < 60);
  CHECK_THAT(view.serve("/metrics").body, Catch::Contains("crun_worker_heartbeat_age_seconds{local_rank=\"0\",rank=\"0\"} ") &&
                                              Catch::Contains("crun_worker_step{local_rank=\"0\",rank=\"0\"} 7\n"));
}

TEST_CASE("operator view: a node that joins an already restarted job emits no restart", "[operator_view]") {
  const crun::test::TempDir dir("crun-opview");
  const std::string events_path = (dir.path / "late.jsonl").string();
  OperatorView view({"job", "default", "h", 1, 3}, EventLog::open("jsonl:" + events_path));
  RoundInfo info;
  info.restart_count = 2;  // the job's count when this node joins
  view.round(5, info, "n3", "10.0.0.3");
  info.restart_count = 3;
  view.round(6, info, "n3", "10.0.0.3");
  std::vector<std::string> kinds;
  std::istringstream events(slurp(events_path));
  std::string line;
  while (std::getline(events, line)) kinds.push_back(json::parse(line)["event"]);
  CHECK(kinds == std::vector<std::string>{"rendezvous_round", "restart", "rendezvous_round"});
}

TEST_CASE("event log: the handlers, and a path that cannot be written", "[operator_view]") {
  CHECK(EventLog::open("null")->is_null());
  CHECK_FALSE(EventLog::open("console")->is_null());
  CHECK_THROWS_WITH(EventLog::open("jsonl:/nonexistent-dir/e.jsonl"),
                    "--event-log-handler: cannot write /nonexistent-dir/e.jsonl: No such file or directory");
  CHECK_THROWS_WITH(EventLog::open("jsonl:/tmp"), "--event-log-handler: cannot write /tmp: Is a directory");
  CHECK_THROWS_WITH(EventLog::open("syslog"), Catch::Contains("expected null, console, dynamic_rendezvous or jsonl:PATH"));
  // Appends: two agents (or two runs) share one file.
  const crun::test::TempDir dir("crun-opview");
  const std::string path = (dir.path / "e.jsonl").string();
  EventLog::open("jsonl:" + path)->emit("stop", R"("exit_code":0)");
  EventLog::open("jsonl:" + path)->emit("stop", "");
  std::istringstream in(slurp(path));
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  CHECK(json::parse(first)["exit_code"] == 0);
  CHECK(json::parse(second)["event"] == "stop");
}

TEST_CASE("operator view: a failure with no restart left is unhealthy and counted at once, while the group stops",
          "[operator_view]") {
  OperatorView view({"job", "trainer", "h", 2, 0}, EventLog::open("null"));
  RoundInfo info;
  info.world_size = 2;
  view.round(0, info, "", "");
  view.group_started(0, {11, 12});
  view.worker_exited(1, 12, ExitStatus::exited(5), false);
  view.failure_known(1, 1, ExitStatus::exited(5), true);  // rank 0 still has its grace period ahead
  const HttpReply health = view.serve("/healthz");
  CHECK(health.status == 503);
  CHECK_THAT(health.body, Catch::StartsWith("failed: rank 1 on h exit code 5, no restart left (--max-restarts 0)"));
  const std::string metrics = view.serve("/metrics").body;
  CHECK_THAT(metrics, Catch::Contains("\ncrun_healthy 0\n"));
  CHECK_THAT(metrics, Catch::Contains("\ncrun_worker_failures_total{reason=\"exit\"} 1\n"));
  // The coordinator's close of a multi-node job: unhealthy from then on, too.
  OperatorView joined({"job", "trainer", "h", 1, 3}, EventLog::open("null"));
  joined.round(0, info, "", "");
  CHECK(joined.serve("/healthz").status == 200);
  joined.job_closed("worker failure on node b (exit code 3); no restarts left (max 3)");
  CHECK(joined.serve("/healthz").status == 503);
  CHECK_THAT(joined.serve("/healthz").body, Catch::StartsWith("failed: the job closed: worker failure on node b"));
}

TEST_CASE("operator view: excluded nodes in the status, the metrics and node_excluded events", "[operator_view]") {
  const crun::test::TempDir dir("crun-opview");
  const std::string events_path = (dir.path / "events.jsonl").string();
  OperatorView view({"job", "trainer", "h0", 1, 3}, EventLog::open("jsonl:" + events_path));
  RoundInfo info;
  info.group_world_size = 2;
  view.round(2, info, "h0:1:a", "10.0.0.1");
  const ExcludedNodeStatus b{"h2:7:b", "h2", "10.0.0.3", "the root cause 2 times", 1, 1795659816.0};
  view.excluded_nodes({b}, 1);
  view.excluded_nodes({b}, 1);  // the same exclusion again (the next round): one event
  const std::string metrics = view.serve("/metrics").body;
  CHECK_THAT(metrics, Catch::Contains("\ncrun_nodes_excluded 1\n") && Catch::Contains("\ncrun_node_exclusions_total 1\n"));
  const auto status = json::parse(view.serve("/status").body);
  CHECK(status["node"]["excluded_nodes"][0]["hostname"] == "h2");
  CHECK(status["node"]["excluded_nodes"][0]["reason"] == "the root cause 2 times");
  CHECK(status["node"]["exclusions_total"] == 1);
  // The excluded node's own view: its state and why.
  OperatorView excluded({"job", "trainer", "h2", 1, 3}, EventLog::open("jsonl:" + events_path));
  excluded.self_excluded("the root cause 2 times", 1795659816.0);
  const auto own = json::parse(excluded.serve("/status").body);
  CHECK(own["node"]["state"] == "excluded");
  CHECK(own["node"]["excluded"] == "the root cause 2 times");
  CHECK(excluded.serve("/healthz").status == 200);  // waiting out its cooldown is not a failure
  std::vector<std::string> kinds;
  std::istringstream events(slurp(events_path));
  std::string line;
  while (std::getline(events, line)) {
    const auto j = json::parse(line);
    if (j["event"] == "node_excluded") kinds.push_back(j.value("excluded_host", std::string("self")));
  }
  CHECK(kinds == std::vector<std::string>{"h2", "self"});
}

TEST_CASE("operator view: a worker's request is an event, in its /status record and in the health", "[operator_view]") {
  const crun::test::TempDir dir("crun-opview");
  const std::string events_path = (dir.path / "events.jsonl").string();
  OperatorView view({"job", "trainer", "h", 2, 3}, EventLog::open("jsonl:" + events_path));
  RoundInfo info;
  info.world_size = 2;
  view.round(0, info, "", "");
  view.group_started(0, {11, 12});
  view.worker_exited(1, 12, ExitStatus::exited(0), false);
  view.worker_request(1, 1, 12, "exclude-node GPU 1: XID 79");
  view.failure_known(1, 1, ExitStatus::exited(0), true);
  const auto health = view.serve("/healthz");
  CHECK(health.status == 503);
  CHECK_THAT(health.body, Catch::Contains("rank 1 on h asked for it (CRUN_CONTROL_FILE): exclude-node GPU 1: XID 79"));
  const auto doc = nlohmann::json::parse(view.serve("/status").body);
  CHECK(doc["node"]["workers"][1]["request"] == "exclude-node GPU 1: XID 79");
  CHECK_FALSE(doc["node"]["workers"][0].contains("request"));
  const auto back = NodeStatus::from_json(view.status().to_json());
  REQUIRE(back);
  CHECK(back->workers[1].request == "exclude-node GPU 1: XID 79");
  std::ifstream in(events_path);
  std::string line, request_event;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"worker_request\"") != std::string::npos) request_event = line;
  }
  const auto e = nlohmann::json::parse(request_event);
  CHECK(e["rank"] == 1);
  CHECK(e["local_rank"] == 1);
  CHECK(e["pid"] == 12);
  CHECK(e["request"] == "exclude-node");
  CHECK(e["reason"] == "GPU 1: XID 79");
  view.group_started(1, {21, 22});  // the next start: no request yet
  CHECK(nlohmann::json::parse(view.serve("/status").body)["node"]["workers"][1].contains("request") == false);
}

namespace {
StackGroups node_stacks(int first_rank, int odd_rank, int attempt) {
  std::vector<RankStack> stacks;
  for (int r = first_rank; r < first_rank + 4; ++r) {
    RankStack s;
    s.rank = r;
    s.python_threads = {{r == odd_rank ? "stuck_here (t.py:3)" : "all_reduce (t.py:9)", "main (t.py:20)"}};
    stacks.push_back(s);
  }
  return group_stacks(stacks, attempt);
}
}  // namespace

TEST_CASE("stack groups in /status: each node's record, the job's merge; the view's setter publishes",
          "[operator_view]") {
  NodeStatus self = sample_node(0, "a");
  NodeStatus other = sample_node(1, "b");
  self.stack_groups = node_stacks(0, -1, 1);
  other.stack_groups = node_stacks(4, 6, 1);
  const auto back = NodeStatus::from_json(other.to_json());
  REQUIRE(back);
  CHECK(*back == other);
  auto j = json::parse(other.to_json());
  j["stack_groups"]["groups"][0]["ranks"] = json::array({json::array({2, 1})});
  CHECK_FALSE(NodeStatus::from_json(j.dump()));  // malformed groups: the record is refused
  j.erase("stack_groups");
  CHECK(NodeStatus::from_json(j.dump())->stack_groups.empty());  // an older node's record

  NodeStatus older_attempt = sample_node(2, "c");
  older_attempt.stack_groups = node_stacks(8, 9, 0);
  auto doc = json::parse(job_json(self, {other.to_json(), older_attempt.to_json()}));
  const auto merged = StackGroups::from_json(doc["job"]["stack_groups"].dump());
  REQUIRE(merged);
  CHECK(merged->attempt == 1);
  REQUIRE(merged->lines() == std::vector<std::string>{"ranks 0-5, 7: all_reduce \xe2\x86\x90 main",
                                                      "rank 6 (the odd one out): stuck_here \xe2\x86\x90 main"});
  CHECK(doc["node"]["stack_groups"]["groups"].size() == 1);
  CHECK(json::parse(job_json(sample_node(0, "a"), {}))["job"]["stack_groups"].is_null());

  // The agent hands the view this node's groups once; /status shows them, and so does what it publishes.
  OperatorView view({"job", "trainer", "h", 4, 0}, EventLog::open("null"));
  std::vector<std::string> published;
  view.set_sharing([&](std::string status, bool) { published.push_back(std::move(status)); }, [] {
    return std::vector<std::string>{};
  });
  const auto before = published.size();
  view.stacks_captured(node_stacks(0, 2, 0));
  REQUIRE(published.size() == before + 1);
  CHECK(NodeStatus::from_json(published.back())->stack_groups == node_stacks(0, 2, 0));
  doc = json::parse(view.serve("/status").body);
  CHECK(doc["job"]["stack_groups"]["groups"][1]["line"] == "rank 2 (the odd one out): stuck_here \xe2\x86\x90 main");
  // A failure report keeps its groups out of last_failure: the record carries them once.
  FailureReport r;
  r.rank = 2;
  r.host = "h";
  r.status = ExitStatus::killed(9);
  r.stack_groups = node_stacks(0, 2, 0);
  view.failure(r, true, "");
  CHECK(json::parse(view.status().last_failure).count("stack_groups") == 0);
  CHECK(view.status().stack_groups == r.stack_groups);
}

TEST_CASE("merged_stack_groups: node rank 0's merge of its own groups and the published records'", "[operator_view]") {
  NodeStatus other = sample_node(1, "b");
  other.stack_groups = node_stacks(4, 6, 1);
  NodeStatus older = sample_node(2, "c");
  older.stack_groups = node_stacks(8, 9, 0);  // another attempt
  NodeStatus foreign = sample_node(3, "d");
  foreign.run_id = "another-job";
  foreign.stack_groups = node_stacks(12, 13, 1);
  const NodeStatus none = sample_node(4, "e");
  const std::vector<std::string> published{other.to_json(), older.to_json(), foreign.to_json(), none.to_json(), "garbage"};
  const auto own = node_stacks(0, -1, 1);
  const auto merged = merged_stack_groups(published, "job", 1, {own, StackGroups{}});
  CHECK(merged == merge_stack_groups({own, other.stack_groups}));
  CHECK(merged.rank_count() == 8);
  CHECK(merged.odd_one_out()->ranks_text() == "rank 6");
  // The same records again (what the report brought and the record both hold): nothing changes.
  CHECK(merged_stack_groups(published, "job", 1, {merged, own, other.stack_groups}) == merged);
  CHECK(merged_stack_groups(published, "job", 0, {own}).rank_count() == 4);  // attempt 0: only node c's
  CHECK(merged_stack_groups({}, "job", 1, {}).empty());
}

TEST_CASE("operator view: a capture and node rank 0's final gathering are events; the merge is in /status", "[operator_view]") {
  const crun::test::TempDir dir("crun-opview");
  const std::string events_path = (dir.path / "events.jsonl").string();
  OperatorView view({"job", "trainer", "h0", 2, 0}, EventLog::open("jsonl:" + events_path));
  RoundInfo info;
  info.group_world_size = 2;
  info.world_size = 4;
  view.round(0, info, "h0:1:a", "10.0.0.1");
  view.capture_ended({0, 1}, {1}, std::chrono::milliseconds(2003));
  std::vector<RankStack> stacks;
  for (int rank : {0, 1, 2, 3}) {
    RankStack s;
    s.rank = rank;
    s.python_threads = {{rank == 3 ? "elsewhere (t.py:9)" : "here (t.py:1)", "<module> (t.py:20)"}};
    stacks.push_back(s);
  }
  const StackGroups merged = group_stacks(stacks, 0);
  view.stacks_gathered({0}, {1}, std::chrono::milliseconds(4100), merged);
  const auto status = json::parse(view.serve("/status").body);
  CHECK(status["job"]["stack_groups"]["rank_count"] == 4);
  CHECK(status["node"]["stack_groups"]["rank_count"] == 4);
  std::vector<json> got;
  std::istringstream events(slurp(events_path));
  std::string line;
  while (std::getline(events, line)) {
    auto j = json::parse(line);
    if (j["event"] == "stacks_captured" || j["event"] == "stacks_gathered") got.push_back(std::move(j));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0]["event"] == "stacks_captured");
  CHECK(got[0]["ranks"] == json::parse("[0,1]"));
  CHECK(got[0]["timed_out"] == json::parse("[1]"));
  CHECK(got[0]["ms"] == 2003);
  CHECK(got[0]["node_rank"] == 0);
  CHECK(got[1]["event"] == "stacks_gathered");
  CHECK(got[1]["nodes_in"] == json::parse("[0]"));
  CHECK(got[1]["nodes_missing"] == json::parse("[1]"));
  CHECK(got[1]["ranks"] == 4);
  CHECK(got[1]["ms"] == 4100);
}
