// EtcdRoundCore: several agents' cores over an in-memory stand-in for etcd's keys (revisions,
// compare-and-swap, lease expiry as deletes), with a fake clock; no etcd, no thread.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>

#include "base/exit_codes.h"
#include "rendezvous/etcd_round_core.h"

using namespace crun;
using namespace std::chrono_literals;

namespace {

using TimePoint = EtcdRoundCore::TimePoint;
const TimePoint t0 = TimePoint{} + 1h;

RendezvousConfig config(int min_nodes, int max_nodes, int max_restarts = 0) {
  RendezvousConfig c;
  c.run_id = "job";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.max_restarts = max_restarts;
  c.last_call_timeout = 30s;
  c.join_timeout = 600s;
  return c;
}

struct Agent {
  std::unique_ptr<EtcdRoundCore> core;
  std::vector<RoundResult> answers;
  std::vector<ControlEvent> controls;
  bool alive = true;
};

// The run's keys, as etcd would hold them (revisions, compare-and-swap, counts), and every agent's
// core: each sees the round record's changes and the alive keys' deletes, as its watches would.
class Job {
 public:
  explicit Job(RendezvousConfig cfg) : cfg_(std::move(cfg)), keys_("/crun/", cfg_.run_id) {}

  Agent& add(const std::string& id, int rank_hint = -1, int nproc = 2) {
    NodeRecord r;
    r.node_id = id;
    r.hostname = "host-" + id;
    r.addr = "10.0.0." + id;
    r.rank_hint = rank_hint;
    r.nproc = nproc;
    r.state_port = static_cast<std::uint16_t>(4000 + std::stoi(id));
    r.max_restarts = cfg_.max_restarts;
    r.min_nodes = cfg_.min_nodes;
    r.max_nodes = cfg_.max_nodes;
    r.program = "train";
    kv_[keys_.alive(id)] = {"host-" + id, ++revision_};
    auto& a = agents_[id];
    a.core = std::make_unique<EtcdRoundCore>(cfg_, keys_, r);
    std::optional<std::pair<std::string, std::int64_t>> round;
    if (auto it = kv_.find(keys_.round()); it != kv_.end()) round = it->second;
    a.core->load(round, with_prefix(keys_.alive_prefix(), true), revision_);
    return a;
  }

  // Every agent (or only those in `only`) decides until none has anything left to do.
  void settle(TimePoint now, const std::set<std::string>& only = {}) {
    for (int pass = 0; pass < 200; ++pass) {
      bool any = false;
      for (auto& [id, a] : agents_) {
        if (!a.alive || (!only.empty() && !only.count(id))) continue;
        EtcdRoundActions act = a.core->decide(now);
        for (auto& r : act.answers) a.answers.push_back(r);
        for (auto& c : act.controls) a.controls.push_back(c);
        if (act.join) {
          kv_[act.join->key] = {act.join->value, ++revision_};
          a.core->on_join_count(act.join->round, static_cast<std::int64_t>(with_prefix(act.join->count_prefix).size()), now);
        }
        if (act.report) {
          kv_[act.report->key] = {act.report->value, ++revision_};
          a.core->on_report_count(act.report->round, static_cast<std::int64_t>(with_prefix(act.report->count_prefix).size()));
        }
        if (act.read_joins) {
          std::vector<EtcdJoinRecord> joins;
          for (const auto& k : with_prefix(keys_.join_prefix(*act.read_joins))) joins.push_back(EtcdJoinRecord::from_json(kv_[k].first));
          a.core->on_joins(*act.read_joins, joins);
          ++reads;
        }
        if (act.read_alive) a.core->on_alive_list(with_prefix(keys_.alive_prefix(), true));
        if (act.write) {
          cas(a, *act.write);
          ++writes;
        }
        any = any || !act.answers.empty() || !act.controls.empty() || act.join || act.report || act.read_joins ||
              act.read_alive || act.write;
      }
      if (!any) return;
    }
    FAIL("the agents did not settle");
  }

  // The agent's lease expires: its keys go; the others see its alive key's delete.
  void kill(const std::string& id) {
    agents_[id].alive = false;
    for (auto it = kv_.begin(); it != kv_.end();) {
      const std::string& k = it->first;
      const bool mine = k == keys_.alive(id) || (k.size() > id.size() + 1 && k.compare(k.size() - id.size() - 1, std::string::npos, "/" + id) == 0 &&
                                                 k.rfind(keys_.base + "alive/", 0) != 0);
      it = mine ? kv_.erase(it) : std::next(it);
    }
    ++revision_;
    for (auto& [other, a] : agents_) a.core->on_node_gone(id);
  }

  Agent& operator[](const std::string& id) { return agents_[id]; }
  // Applies one agent's compare-and-swap, as etcd would.
  void apply(Agent& a, const EtcdRoundWrite& w) { cas(a, w); }
  const EtcdKeys& keys() const { return keys_; }
  std::optional<EtcdRoundRecord> record() const {
    auto it = kv_.find(keys_.round());
    if (it == kv_.end()) return std::nullopt;
    return EtcdRoundRecord::from_json(it->second.first);
  }
  int writes = 0;
  int reads = 0;

 private:
  std::vector<std::string> with_prefix(const std::string& prefix, bool strip = false) const {
    std::vector<std::string> out;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      out.push_back(strip ? it->first.substr(prefix.size()) : it->first);
    }
    return out;
  }
  void cas(Agent& a, const EtcdRoundWrite& w) {
    auto it = kv_.find(keys_.round());
    const std::int64_t now = it == kv_.end() ? 0 : it->second.second;
    if (now == w.if_revision) {
      kv_[keys_.round()] = {w.next.to_json(), ++revision_};
      for (auto& [id, other] : agents_) other.core->on_round(w.next.to_json(), revision_);
    } else if (it != kv_.end()) {
      a.core->on_round(it->second.first, it->second.second);
    }
    a.core->write_done();
  }

  RendezvousConfig cfg_;
  EtcdKeys keys_;
  std::map<std::string, std::pair<std::string, std::int64_t>> kv_;
  std::int64_t revision_ = 0;
  std::map<std::string, Agent> agents_;
};

void request(Job& job, std::initializer_list<const char*> ids, TimePoint now) {
  for (const char* id : ids) job[id].core->request_round(now, 29500);
}

}  // namespace

TEST_CASE("max nodes form a round at once, ranked by node id, node rank 0 the master", "[etcd_core]") {
  Job job(config(2, 3));
  for (const char* id : {"3", "1", "2"}) job.add(id);
  request(job, {"3", "1", "2"}, t0);
  job.settle(t0);
  for (const char* id : {"1", "2", "3"}) {
    REQUIRE(job[id].answers.size() == 1);
    const RoundResult& r = job[id].answers.front();
    CHECK(r.error.empty());
    CHECK(r.rendezvous_round == 0);
    CHECK(r.info.group_world_size == 3);
    CHECK(r.info.group_rank == std::stoi(id) - 1);
    CHECK(r.info.rank_offset == r.info.group_rank * 2);
    CHECK(r.info.world_size == 6);
    CHECK(r.info.master_addr == "10.0.0.1");
    CHECK(r.info.restart_count == 0);
  }
}

TEST_CASE("min nodes form a round after the last call, not before", "[etcd_core]") {
  Job job(config(2, 3));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  CHECK(job["1"].answers.empty());
  job.settle(t0 + 29s);
  CHECK(job["1"].answers.empty());
  job.settle(t0 + 31s);
  REQUIRE(job["1"].answers.size() == 1);
  REQUIRE(job["2"].answers.size() == 1);
  CHECK(job["2"].answers.front().info.group_world_size == 2);
}

TEST_CASE("rank hints order nodes before their ids", "[etcd_core]") {
  Job job(config(2, 2));
  job.add("1", 1);
  job.add("2", 0);
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  CHECK(job["2"].answers.at(0).info.group_rank == 0);
  CHECK(job["1"].answers.at(0).info.group_rank == 1);
  CHECK(job["1"].answers.at(0).info.master_addr == "10.0.0.2");
  // Every node's state endpoint, in node-rank order, from the running round record.
  const std::vector<std::string> endpoints{"10.0.0.2:4002", "10.0.0.1:4001"};
  CHECK(job["1"].answers.at(0).info.state_endpoints == endpoints);
  CHECK(job["2"].answers.at(0).info.state_endpoints == endpoints);
}

TEST_CASE("a worker failure restarts every node, which re-form at once with the same ranks", "[etcd_core]") {
  Job job(config(2, 3, 2));
  for (const char* id : {"1", "2", "3"}) job.add(id);
  request(job, {"1", "2", "3"}, t0);
  job.settle(t0);
  RoundOutcome o;
  o.exit_code = 3;
  o.report = "{\"rank\":4}";
  job["2"].core->publish_failure(0, o);
  job.settle(t0 + 1s);
  for (const char* id : {"1", "2", "3"}) {
    REQUIRE(job[id].controls.size() == 1);
    const ControlEvent& c = job[id].controls.front();
    CHECK(c.kind == ControlEvent::Kind::kStop);
    CHECK(c.round == 0);
    CHECK(c.failure);
    CHECK(c.restart_count == 1);
    CHECK(c.origin_node == "2");
    CHECK(c.report == o.report);
  }
  request(job, {"3", "2", "1"}, t0 + 2s);
  job.settle(t0 + 2s);  // every node of round 0 is back: no last call
  for (const char* id : {"1", "2", "3"}) {
    REQUIRE(job[id].answers.size() == 2);
    CHECK(job[id].answers.back().rendezvous_round == 1);
    CHECK(job[id].answers.back().info.restart_count == 1);
    CHECK(job[id].answers.back().info.group_rank == std::stoi(id) - 1);
  }
}

TEST_CASE("a failure with no restart left closes the job with its exit code", "[etcd_core]") {
  Job job(config(2, 2, 0));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  RoundOutcome o;
  o.exit_code = 137;
  job["1"].core->publish_failure(0, o);
  job.settle(t0);
  for (const char* id : {"1", "2"}) {
    REQUIRE(job[id].controls.size() == 1);
    CHECK(job[id].controls.front().kind == ControlEvent::Kind::kClosed);
    CHECK(job[id].controls.front().exit_code == 137);
    CHECK(job[id].controls.front().origin_node == "1");
  }
  // A node that comes later finds the job closed.
  job.add("3");
  request(job, {"3"}, t0);
  job.settle(t0);
  REQUIRE(job["3"].answers.size() == 1);
  CHECK(job["3"].answers.front().exit_code == kExitRendezvousClosed);
}

TEST_CASE("a lost node, node rank 0 included, ends the round without a restart; the rest re-form", "[etcd_core]") {
  Job job(config(2, 3, 1));
  for (const char* id : {"1", "2", "3"}) job.add(id);
  request(job, {"1", "2", "3"}, t0);
  job.settle(t0);
  job.kill("1");
  job.settle(t0 + 2s);
  for (const char* id : {"2", "3"}) {
    REQUIRE(job[id].controls.size() == 1);
    CHECK(job[id].controls.front().kind == ControlEvent::Kind::kStop);
    CHECK_FALSE(job[id].controls.front().failure);
    CHECK(job[id].controls.front().restart_count == 0);
    CHECK_THAT(job[id].controls.front().detail, Catch::Contains("node 1") && Catch::Contains("lost"));
  }
  request(job, {"2", "3"}, t0 + 3s);
  job.settle(t0 + 3s);  // the survivors are all back: at once
  // 2 keeps its rank 1; 3's rank 2 is past the round's size: it takes the hole 1 left (node_order.h).
  CHECK(job["2"].answers.back().info.group_rank == 1);
  CHECK(job["3"].answers.back().info.group_rank == 0);
  CHECK(job["3"].answers.back().info.group_world_size == 2);
  CHECK(job["3"].answers.back().info.master_addr == "10.0.0.3");
  CHECK(job["3"].answers.back().info.restart_count == 0);
}

TEST_CASE("a late joiner scales the job up without a restart", "[etcd_core]") {
  Job job(config(2, 3, 0));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job.settle(t0 + 31s);
  REQUIRE(job["1"].answers.size() == 1);
  job.add("3");
  request(job, {"3"}, t0 + 40s);
  job.settle(t0 + 40s);
  for (const char* id : {"1", "2"}) {
    REQUIRE(job[id].controls.size() == 1);
    CHECK_THAT(job[id].controls.front().detail, Catch::Contains("scaling up"));
    CHECK_FALSE(job[id].controls.front().failure);
  }
  request(job, {"1", "2"}, t0 + 41s);
  job.settle(t0 + 41s);  // max nodes: at once
  for (const char* id : {"1", "2", "3"}) {
    REQUIRE(!job[id].answers.empty());
    CHECK(job[id].answers.back().rendezvous_round == 1);
    CHECK(job[id].answers.back().info.group_world_size == 3);
    CHECK(job[id].answers.back().info.restart_count == 0);
  }
}

TEST_CASE("a late joiner is in the next round even when the others rejoin before it", "[etcd_core]") {
  Job job(config(2, 3, 0));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job.settle(t0 + 31s);
  job.add("3");
  request(job, {"3"}, t0 + 40s);
  const EtcdRoundActions scale_up = job["3"].core->decide(t0 + 40s);  // its compare-and-swap only
  REQUIRE(scale_up.write);
  job.apply(job["3"], *scale_up.write);
  job.settle(t0 + 40s, {"1", "2"});  // round 0 ended for them
  request(job, {"1", "2"}, t0 + 41s);
  job.settle(t0 + 41s, {"1", "2"});  // both back before the joiner puts its join
  CHECK(job["1"].answers.size() == 1);
  job.settle(t0 + 41s);
  for (const char* id : {"1", "2", "3"}) {
    REQUIRE(!job[id].answers.empty());
    CHECK(job[id].answers.back().rendezvous_round == 1);
    CHECK(job[id].answers.back().info.group_world_size == 3);
  }
}

TEST_CASE("success reported by every node closes the job with 0", "[etcd_core]") {
  Job job(config(2, 2));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job["1"].core->publish_success(0);
  job.settle(t0);
  CHECK(job["1"].controls.empty());
  job["2"].core->publish_success(0);
  job.settle(t0);
  for (const char* id : {"1", "2"}) {
    REQUIRE(job[id].controls.size() == 1);
    CHECK(job[id].controls.front().kind == ControlEvent::Kind::kClosed);
    CHECK(job[id].controls.front().exit_code == 0);
  }
}

TEST_CASE("a node configured unlike the first one is rejected, naming the difference", "[etcd_core]") {
  Job job(config(2, 2));
  job.add("1");
  request(job, {"1"}, t0);
  job.settle(t0);
  job.add("2", -1, 4);
  request(job, {"2"}, t0);
  job.settle(t0);
  REQUIRE(job["2"].answers.size() == 1);
  CHECK(job["2"].answers.front().exit_code == kExitRendezvousRejected);
  CHECK_THAT(job["2"].answers.front().error, Catch::Contains("nproc 4 vs 2"));
}

TEST_CASE("no round within the join timeout ends the request with exit 4", "[etcd_core]") {
  Job job(config(2, 2));
  job.add("1");
  request(job, {"1"}, t0);
  job.settle(t0 + 599s);
  CHECK(job["1"].answers.empty());
  job.settle(t0 + 601s);
  REQUIRE(job["1"].answers.size() == 1);
  CHECK(job["1"].answers.front().exit_code == kExitRendezvousTimeout);
}

TEST_CASE("restarts that make no progress close the job with kExitNoProgress", "[etcd_core]") {
  RendezvousConfig cfg = config(1, 2, 10);
  cfg.no_progress_limit = 2;
  cfg.exclude_after = 0;  // node 1 fails every time: with node 2 able to go on alone it would be excluded
  Job job(cfg);
  job.add("1");
  job.add("2");
  TimePoint now = t0;
  request(job, {"1", "2"}, now);
  job.settle(now);
  for (int attempt = 0; attempt < 3; ++attempt) {
    RoundOutcome o;
    o.exit_code = 1;
    o.highest_step = 7;  // the same step every time: progress only the first time
    job["1"].core->publish_failure(attempt, o);
    now += 1s;
    job.settle(now);
    if (attempt < 2) {
      request(job, {"1", "2"}, now);
      job.settle(now);
    }
  }
  REQUIRE(!job["2"].controls.empty());
  CHECK(job["2"].controls.back().kind == ControlEvent::Kind::kClosed);
  CHECK(job["2"].controls.back().exit_code == kExitNoProgress);
  CHECK(job.record()->best_step == 7);
}

TEST_CASE("an older value of the round record never replaces a newer one", "[etcd_core]") {
  Job job(config(1, 1));
  job.add("1");
  request(job, {"1"}, t0);
  job.settle(t0);
  REQUIRE(job["1"].answers.size() == 1);
  EtcdRoundRecord stale;
  stale.reference = "{}";
  job["1"].core->on_round(stale.to_json(), 1);  // revision 1: long gone
  job.settle(t0);
  CHECK(job["1"].controls.empty());
}

TEST_CASE("a round of many nodes takes O(1) reads and compare-and-swaps, not O(nodes)", "[etcd_core]") {
  Job job(config(64, 64));
  for (int i = 0; i < 64; ++i) job.add(std::to_string(100 + i));
  for (int i = 0; i < 64; ++i) job[std::to_string(100 + i)].core->request_round(t0, 29500);
  job.settle(t0);
  for (int i = 0; i < 64; ++i) REQUIRE(job[std::to_string(100 + i)].answers.size() == 1);
  CHECK(job.writes <= 3);  // create, freeze
  CHECK(job.reads <= 2);   // the 64th joiner reads the joins
}

TEST_CASE("an expected node that dies while the others rejoin does not hold the round up", "[etcd_core]") {
  Job job(config(2, 3, 1));
  for (const char* id : {"1", "2", "3"}) job.add(id);
  request(job, {"1", "2", "3"}, t0);
  job.settle(t0);
  RoundOutcome o;
  o.exit_code = 1;
  job["3"].core->publish_failure(0, o);
  job.settle(t0 + 1s);
  request(job, {"1", "2"}, t0 + 1s);
  job.settle(t0 + 1s);
  CHECK(job["1"].answers.size() == 1);  // 3 is still expected
  job.kill("3");
  job.settle(t0 + 2s);  // every live node of round 0 is back: at once, no last call
  REQUIRE(job["1"].answers.size() == 2);
  CHECK(job["1"].answers.back().info.group_world_size == 2);
  CHECK(job["2"].answers.back().info.restart_count == 1);
}

TEST_CASE("a record left by a dead job: its nodes count as gone, the new agents go on", "[etcd_core]") {
  Job job(config(1, 2));
  job.add("1");
  request(job, {"1"}, t0);
  job.settle(t0);
  job.settle(t0 + 31s);
  REQUIRE(job["1"].answers.size() == 1);
  job.kill("1");
  job.add("2");
  request(job, {"2"}, t0 + 40s);
  job.settle(t0 + 40s);
  job.settle(t0 + 71s);
  REQUIRE(job["2"].answers.size() == 1);
  CHECK(job["2"].answers.front().info.group_rank == 0);
  CHECK(job["2"].answers.front().info.group_world_size == 1);
}

// ---- Exclusion and hot spares ----

namespace {

RendezvousConfig excluding(int min_nodes, int max_nodes, int exclude_after, std::chrono::milliseconds cooldown = 10s) {
  RendezvousConfig c = config(min_nodes, max_nodes, 10);
  c.exclude_after = exclude_after;
  c.exclude_cooldown = cooldown;
  return c;
}

RoundOutcome failure(int code = 1) {
  RoundOutcome o;
  o.exit_code = code;
  o.report = "{}";
  return o;
}

std::int64_t wall(TimePoint t) { return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count(); }

}  // namespace

TEST_CASE("etcd: the root cause twice is excluded; the waiting spare takes its rank at once", "[etcd_core][exclusion]") {
  Job job(excluding(2, 2, 2));
  for (const char* id : {"1", "2", "3"}) job.add(id);
  request(job, {"1", "2", "3"}, t0);
  job.settle(t0);
  REQUIRE(job["2"].answers.size() == 1);
  CHECK(job["2"].answers.back().info.group_rank == 1);
  CHECK(job["3"].answers.empty());  // the spare waits: the round is full

  job["2"].core->publish_failure(0, failure());
  job.settle(t0 + 1s);
  CHECK(job.record()->root_causes.at("2") == 1);
  request(job, {"1", "2"}, t0 + 2s);
  job.settle(t0 + 2s);  // the spare joined too, yet the previous round's nodes come first
  REQUIRE(job["2"].answers.size() == 2);
  CHECK(job["2"].answers.back().info.group_rank == 1);
  CHECK(job["3"].answers.empty());

  job["2"].core->publish_failure(1, failure());
  job.settle(t0 + 3s);
  auto rec = job.record();
  REQUIRE(rec);
  REQUIRE(rec->excluded.size() == 1);
  CHECK(rec->excluded[0].node_id == "2");
  CHECK(rec->excluded[0].hostname == "host-2");
  CHECK(rec->excluded[0].reason == "the root cause 2 times");
  CHECK(rec->excluded[0].times == 1);
  CHECK(rec->excluded[0].until_unix_ms == wall(t0 + 13s));
  CHECK(rec->exclusions_total == 1);
  CHECK(rec->restart_count == 2);
  REQUIRE(job["1"].controls.size() == 2);
  CHECK(job["1"].controls.back().detail.find("excluded for 10 s (exclusion 1)") != std::string::npos);

  request(job, {"1", "2"}, t0 + 4s);
  job.settle(t0 + 4s);  // 1 is back, the spare with it: the round forms without a last call
  REQUIRE(job["3"].answers.size() == 1);
  CHECK(job["3"].answers.back().info.group_rank == 1);
  CHECK(job["3"].answers.back().info.restart_count == 2);
  CHECK(job["1"].answers.back().info.group_rank == 0);
  REQUIRE(job["1"].answers.back().excluded.size() == 1);
  CHECK(job["1"].answers.back().exclusions_total == 1);
  // The excluded node is answered without joining.
  REQUIRE(job["2"].answers.size() == 3);
  const RoundResult& ex = job["2"].answers.back();
  CHECK(ex.excluded_for == 9000ms);
  CHECK(ex.excluded_reason == "the root cause 2 times");
  CHECK(ex.error.find("is excluded until 1970-01-01T01:00:13Z (9 s more): the root cause 2 times") != std::string::npos);
}

TEST_CASE("etcd: after its cooldown a node joins again; its next cooldown doubles", "[etcd_core][exclusion]") {
  Job job(excluding(1, 2, 1));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job["2"].core->publish_failure(0, failure());
  job.settle(t0 + 1s);
  request(job, {"1", "2"}, t0 + 2s);
  job.settle(t0 + 2s);
  CHECK(job["1"].answers.back().info.group_world_size == 1);
  CHECK(job["2"].answers.back().excluded_for == 9000ms);

  request(job, {"2"}, t0 + 12s);  // cooldown over: it joins, scaling the job up
  job.settle(t0 + 12s);
  request(job, {"1"}, t0 + 12s);
  job.settle(t0 + 12s);
  REQUIRE(job["2"].answers.back().error.empty());
  CHECK(job["2"].answers.back().info.group_world_size == 2);

  job["2"].core->publish_failure(job["2"].answers.back().rendezvous_round, failure());
  job.settle(t0 + 13s);
  auto rec = job.record();
  REQUIRE(rec->excluded.size() == 1);
  CHECK(rec->excluded[0].times == 2);
  CHECK(rec->excluded[0].until_unix_ms == wall(t0 + 33s));  // 20 s: doubled
  CHECK(rec->exclusions_total == 2);
}

TEST_CASE("etcd: a node no other can replace is kept, and one line says so", "[etcd_core][exclusion]") {
  Job job(excluding(2, 2, 2));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job["2"].core->publish_failure(0, failure());
  job.settle(t0 + 1s);
  request(job, {"1", "2"}, t0 + 2s);
  job.settle(t0 + 2s);
  job["2"].core->publish_failure(1, failure());
  auto read = job["2"].core->decide(t0 + 3s);  // an exclusion is due: who is alive is read first
  REQUIRE(read.read_alive);
  CHECK_FALSE(read.write);
  job["2"].core->on_alive_list({"1", "2"});
  auto act = job["2"].core->decide(t0 + 3s);
  REQUIRE(act.write);
  job.apply(job["2"], *act.write);
  auto after = job["2"].core->decide(t0 + 3s);
  bool said = false;
  for (const auto& l : act.progress) said = said || l.find("was the root cause 2 times; kept: no other node can replace it") != std::string::npos;
  for (const auto& l : after.progress) said = said || l.find("was the root cause 2 times; kept: no other node can replace it") != std::string::npos;
  CHECK(said);
  CHECK(job.record()->excluded.empty());
  job.settle(t0 + 3s);
  request(job, {"1", "2"}, t0 + 4s);
  job.settle(t0 + 4s);
  CHECK(job["2"].answers.back().error.empty());
  CHECK(job["2"].answers.back().info.group_rank == 1);
}

TEST_CASE("etcd: exclude_request excludes at once, or closes with kExitNodeUnhealthy; stop_request closes",
          "[etcd_core][exclusion]") {
  SECTION("a spare can take its place") {
    Job job(excluding(2, 2, 5));
    for (const char* id : {"1", "2", "3"}) job.add(id);
    request(job, {"1", "2", "3"}, t0);
    job.settle(t0);
    RoundOutcome o = failure();
    o.exclude_request = "XID 79";
    job["1"].core->publish_failure(0, o);
    job.settle(t0 + 1s);
    request(job, {"1", "2"}, t0 + 2s);
    job.settle(t0 + 2s);
    CHECK(job["1"].answers.back().excluded_reason == "a worker asked to exclude it: XID 79");
    CHECK(job["3"].answers.back().info.group_rank == 0);  // the spare takes node rank 0
    CHECK(job["2"].answers.back().info.group_rank == 1);
    CHECK(job["3"].answers.back().info.master_addr == "10.0.0.3");
  }
  SECTION("no node can replace it") {
    Job job(excluding(2, 2, 5));
    job.add("1");
    job.add("2");
    request(job, {"1", "2"}, t0);
    job.settle(t0);
    RoundOutcome o = failure();
    o.exclude_request = "XID 79";
    job["1"].core->publish_failure(0, o);
    job.settle(t0 + 1s);
    REQUIRE(job["2"].controls.size() == 1);
    CHECK(job["2"].controls.back().kind == ControlEvent::Kind::kClosed);
    CHECK(job["2"].controls.back().exit_code == kExitNodeUnhealthy);
    CHECK(job["2"].controls.back().detail.find("XID 79") != std::string::npos);
  }
  SECTION("stop_request") {
    Job job(excluding(2, 2, 5));
    job.add("1");
    job.add("2");
    request(job, {"1", "2"}, t0);
    job.settle(t0);
    RoundOutcome o = failure(3);
    o.stop_request = "loss is NaN";
    job["2"].core->publish_failure(0, o);
    job.settle(t0 + 1s);
    REQUIRE(job["1"].controls.size() == 1);
    CHECK(job["1"].controls.back().kind == ControlEvent::Kind::kClosed);
    CHECK(job["1"].controls.back().exit_code == 3);
    CHECK(job["1"].controls.back().detail.find("asked to stop the job (exit code 3): loss is NaN") != std::string::npos);
    CHECK(job.record()->restart_count == 0);
  }
}

TEST_CASE("etcd: the job closing while a node waits excluded reaches it as a close", "[etcd_core][exclusion]") {
  Job job(excluding(1, 2, 1));
  job.add("1");
  job.add("2");
  request(job, {"1", "2"}, t0);
  job.settle(t0);
  job["2"].core->publish_failure(0, failure());
  job.settle(t0 + 1s);
  request(job, {"1", "2"}, t0 + 2s);
  job.settle(t0 + 2s);
  REQUIRE(job["2"].answers.back().excluded_for > 0ms);
  job["1"].core->publish_success(job["1"].answers.back().rendezvous_round);
  job.settle(t0 + 3s);
  REQUIRE_FALSE(job["2"].controls.empty());
  CHECK(job["2"].controls.back().kind == ControlEvent::Kind::kClosed);
  CHECK(job["2"].controls.back().exit_code == 0);
}

TEST_CASE("etcd: a lost node's waiting spare takes its rank without a last call", "[etcd_core][exclusion]") {
  Job job(excluding(2, 3, 2));  // last call 30 s
  for (const char* id : {"1", "2", "3", "4"}) job.add(id);
  request(job, {"1", "2", "3"}, t0);
  job.settle(t0);
  request(job, {"4"}, t0);
  job.settle(t0);
  REQUIRE(job["4"].answers.empty());  // the spare waits
  const int lost_rank = job["1"].answers.back().info.group_rank;
  job.kill("1");
  job.settle(t0 + 1s);
  request(job, {"2", "3"}, t0 + 1s);
  job.settle(t0 + 1s);  // no time passes: no last call
  REQUIRE(job["4"].answers.size() == 1);
  CHECK(job["4"].answers.back().info.group_rank == lost_rank);
  CHECK(job["4"].answers.back().info.group_world_size == 3);
  CHECK(job["2"].answers.back().info.group_rank == 1);
  CHECK(job["3"].answers.back().info.group_rank == 2);
}
