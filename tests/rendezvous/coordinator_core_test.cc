// CoordinatorCore with a fake clock: events in, effects out; no store, no thread.
#include <algorithm>

#include <catch2/catch.hpp>

#include "base/exit_codes.h"
#include "rendezvous/coordinator_core.h"

using namespace crun;
using namespace std::chrono_literals;
namespace fx = crun::coordinator_effect;

namespace {

const CoordinatorClock::time_point t0 = CoordinatorClock::time_point{} + 1h;  // the fake clock

RendezvousConfig config(int min_nodes, int max_nodes, int max_restarts = 0) {
  RendezvousConfig c;
  c.run_id = "job42";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.max_restarts = max_restarts;
  c.last_call_timeout = 30s;
  c.heartbeat_timeout = 120s;  // no scan drops a node unless a test means it to
  return c;
}

NodeRecord node(const std::string& id, int seq = 1, int hint = -1) {
  NodeRecord r;
  r.node_id = id;
  r.hostname = "host-" + id;
  r.addr = "10.0.0." + id;
  r.free_port = static_cast<std::uint16_t>(29500 + seq);
  r.rank_hint = hint;
  r.seq = seq;
  r.nproc = 2;
  r.program = "train";
  return r;
}

// Same configuration fields as `config(min, max, restarts)` expects.
NodeRecord member(const RendezvousConfig& c, const std::string& id, int seq = 1, int hint = -1) {
  NodeRecord r = node(id, seq, hint);
  r.min_nodes = c.min_nodes;
  r.max_nodes = c.max_nodes;
  r.max_restarts = c.max_restarts;
  return r;
}

template <typename E>
std::vector<E> all(const CoordinatorEffects& effects) {
  std::vector<E> out;
  for (const auto& e : effects) {
    if (auto* p = std::get_if<E>(&e)) out.push_back(*p);
  }
  return out;
}

template <typename E>
const E* find(const CoordinatorEffects& effects) {
  for (const auto& e : effects) {
    if (auto* p = std::get_if<E>(&e)) return p;
  }
  return nullptr;
}

// node id -> its answer, from every Answer effect.
std::map<std::string, RoundAnswer> answers(const CoordinatorEffects& effects) {
  std::map<std::string, RoundAnswer> out;
  for (const auto& a : all<fx::Answer>(effects)) {
    for (const auto& entry : a.entries) out[entry.node_id] = entry.answer;
  }
  return out;
}

std::vector<std::string> pruned(const CoordinatorEffects& effects) {
  std::vector<std::string> out;
  for (const auto& p : all<fx::Prune>(effects)) out.push_back(p.key);
  return out;
}

bool logged(const CoordinatorEffects& effects, const std::string& part) {
  for (const auto& l : all<fx::Log>(effects)) {
    if (l.line.find(part) != std::string::npos) return true;
  }
  return false;
}

void append(CoordinatorEffects& to, const CoordinatorEffects& from) { to.insert(to.end(), from.begin(), from.end()); }

// Joins every node (alive first, as an agent does) at `now`; returns every effect.
CoordinatorEffects join_all(CoordinatorCore& core, const std::vector<NodeRecord>& nodes, CoordinatorClock::time_point now) {
  CoordinatorEffects out;
  for (const auto& n : nodes) {
    append(out, core.on_alive(n.node_id, now));
    append(out, core.on_join(n, now));
  }
  return out;
}

// Runs the timers at each deadline before `until`, then at `until`, as the coordinator's thread
// does; every node in `beating` sends a heartbeat just before each run. Returns every effect.
CoordinatorEffects run_until(CoordinatorCore& core, CoordinatorClock::time_point until,
                             const std::vector<std::string>& beating = {}) {
  CoordinatorEffects out;
  auto run = [&](CoordinatorClock::time_point at) {
    for (const auto& n : beating) append(out, core.on_heartbeat(n, at));
    append(out, core.on_timers(at));
  };
  for (auto next = core.next_deadline(); next && *next < until; next = core.next_deadline()) run(*next);
  run(until);
  return out;
}

RoundOutcome failed(int code, const std::string& report = "{\"why\":1}") {
  RoundOutcome o;
  o.exit_code = code;
  o.report = report;
  return o;
}

RoundOutcome succeeded() {
  RoundOutcome o;
  o.succeeded = true;
  return o;
}

const RendezvousKeys keys("job42");

}  // namespace

TEST_CASE("core: a fixed-size round forms once every node joined", "[coordinator_core]") {
  auto c = config(2, 2);
  CoordinatorCore core(c, std::nullopt);
  auto first = join_all(core, {member(c, "b")}, t0);
  CHECK(answers(first).empty());
  CHECK(core.round() == -1);
  auto second = join_all(core, {member(c, "a")}, t0 + 1s);
  auto got = answers(second);
  REQUIRE(got.size() == 2);
  CHECK(all<fx::Answer>(second).size() == 1);  // one write for the whole round
  CHECK(got["a"].node_rank == 0);               // no hints, no previous ranks: by node id
  CHECK(got["b"].node_rank == 1);
  CHECK(got["a"].nnodes == 2);
  CHECK(got["b"].master_addr == "10.0.0.a");
  CHECK(got["b"].master_port == 29501);
  CHECK(got["a"].round == 0);
  CHECK(got["a"].restart_count == 0);
  CHECK(core.round() == 0);
  CHECK(logged(second, "round 0 formed with 2 node(s), restart count 0"));
  // The workers' keys go before the answers do (the answers start the workers).
  auto clear = std::find_if(second.begin(), second.end(), [](auto& e) { return std::holds_alternative<fx::ClearWorkerKeys>(e); });
  auto answer = std::find_if(second.begin(), second.end(), [](auto& e) { return std::holds_alternative<fx::Answer>(e); });
  CHECK(clear < answer);
  CHECK(all<fx::ClearWorkerKeys>(first).empty());
}

TEST_CASE("core: rank hints come first, then the previous rank, then the node id", "[coordinator_core]") {
  auto c = config(3, 3, 1);
  CoordinatorCore core(c, std::nullopt);
  auto got = answers(join_all(core, {member(c, "a", 1, 2), member(c, "b", 1), member(c, "c", 1, 0)}, t0));
  REQUIRE(got.size() == 3);
  CHECK(got["c"].node_rank == 0);
  CHECK(got["a"].node_rank == 1);  // hint 2 comes before "b", which has none
  CHECK(got["b"].node_rank == 2);

  // Without hints, a node keeps its previous rank across rounds though its id sorts first.
  CoordinatorCore stable(c, std::nullopt);
  auto r0 = answers(join_all(stable, {member(c, "z", 1, 0), member(c, "y", 1, 1), member(c, "x", 1, 2)}, t0));
  REQUIRE(r0["x"].node_rank == 2);
  stable.on_report(0, "x", failed(1), t0 + 1s);
  auto r1 = answers(join_all(stable, {member(c, "x", 2), member(c, "y", 2), member(c, "z", 2)}, t0 + 2s));
  REQUIRE(r1.size() == 3);
  CHECK(r1["z"].node_rank == 0);
  CHECK(r1["y"].node_rank == 1);
  CHECK(r1["x"].node_rank == 2);
  CHECK(r1["x"].round == 1);
  CHECK(r1["x"].restart_count == 1);
}

TEST_CASE("core: between min and max nodes the round forms when the last call ends", "[coordinator_core]") {
  auto c = config(2, 3);
  CoordinatorCore core(c, std::nullopt);
  CHECK_FALSE(core.next_deadline().has_value());
  join_all(core, {member(c, "a")}, t0);
  auto two = join_all(core, {member(c, "b")}, t0 + 1s);
  CHECK(answers(two).empty());
  REQUIRE(core.next_deadline().has_value());
  CHECK(answers(core.on_timers(t0 + 30s)).empty());  // 29 s after the second join: not yet
  auto formed = core.on_timers(t0 + 31s);
  auto got = answers(formed);
  REQUIRE(got.size() == 2);
  CHECK(got["a"].nnodes == 2);
}

TEST_CASE("core: max nodes form the round at once, and a full round makes a joiner wait", "[coordinator_core]") {
  auto c = config(1, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a")}, t0);
  auto got = answers(join_all(core, {member(c, "b")}, t0));
  REQUIRE(got.size() == 2);
  auto third = join_all(core, {member(c, "c")}, t0 + 1s);
  CHECK(answers(third).empty());
  CHECK(all<fx::Control>(third).empty());
  CHECK(logged(third, "waits: the round is at its maximum of 2 nodes"));
}

TEST_CASE("core: the reference configuration rejects a differing node with both names", "[coordinator_core]") {
  auto c = config(2, 2);
  SECTION("the hosting agent's record is the reference") {
    CoordinatorCore core(c, member(c, "host"));
    NodeRecord other = member(c, "a");
    other.nproc = 4;
    auto e = join_all(core, {other}, t0);
    auto got = answers(e);
    REQUIRE(got.size() == 1);
    // The host's record is described in full though the host has not joined yet.
    CHECK(got["a"].error ==
          "configuration of node host-a (10.0.0.a, a) differs from node host-host (10.0.0.host, host): nproc 4 vs 2");
    CHECK_FALSE(got["a"].closed);
    CHECK(logged(e, "rendezvous: rejected configuration of node host-a"));
  }
  SECTION("without one, the first node to join sets it") {
    CoordinatorCore core(c, std::nullopt);
    join_all(core, {member(c, "a")}, t0);
    NodeRecord other = member(c, "b");
    other.program = "eval";
    auto got = answers(join_all(core, {other}, t0));
    REQUIRE(got.size() == 1);
    CHECK_THAT(got["b"].error, Catch::Contains("differs from node host-a (10.0.0.a, a): program eval vs train"));
    CHECK(core.round() == -1);  // the rejected node does not count
  }
  SECTION("a join already handled (same or older seq) is ignored") {
    CoordinatorCore core(c, std::nullopt);
    join_all(core, {member(c, "a", 2)}, t0);
    CHECK(core.on_join(member(c, "a", 2), t0).empty());
    CHECK(core.on_join(member(c, "a", 1), t0).empty());
  }
}

TEST_CASE("core: a failure restarts while restarts remain, then closes with its code", "[coordinator_core]") {
  auto c = config(2, 2, 1);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a"), member(c, "b")}, t0);
  CHECK(core.on_report(5, "a", failed(3), t0).empty());  // not the running round
  auto stop = core.on_report(0, "b", failed(3, "rep-b"), t0 + 1s);
  auto ctl = all<fx::Control>(stop);
  REQUIRE(ctl.size() == 1);
  CHECK(ctl[0].event.kind == ControlEvent::Kind::kStop);
  CHECK(ctl[0].event.round == 0);
  CHECK(ctl[0].event.restart_count == 1);
  CHECK(ctl[0].event.failure);
  CHECK(ctl[0].event.origin_node == "b");
  CHECK(ctl[0].event.report == "rep-b");
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("worker failure on node host-b") && Catch::Contains("restart 1 of 1"));
  CHECK(core.restart_count() == 1);
  CHECK(core.on_report(0, "a", failed(3), t0 + 1s).empty());  // the round already ended

  join_all(core, {member(c, "a", 2), member(c, "b", 2)}, t0 + 2s);
  REQUIRE(core.round() == 1);
  auto close = core.on_report(1, "a", failed(9, "rep-a"), t0 + 3s);
  REQUIRE(close.size() >= 2);
  CHECK(std::holds_alternative<fx::Closed>(close[0]));  // counted closed before the close is written
  auto closing = std::get<fx::Control>(close[1]).event;
  CHECK(closing.kind == ControlEvent::Kind::kClosed);
  CHECK(closing.exit_code == 9);
  CHECK(closing.failure);
  CHECK(closing.report == "rep-a");
  CHECK_THAT(closing.detail, Catch::Contains("no restarts left (max 1)"));
  CHECK(core.closed());
}

TEST_CASE("core: success on every participant closes the job with 0; later joins are told it closed", "[coordinator_core]") {
  auto c = config(2, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a"), member(c, "b")}, t0);
  CHECK(core.on_report(0, "a", succeeded(), t0).empty());
  CHECK_FALSE(core.closed());
  auto e = core.on_report(0, "b", succeeded(), t0);
  REQUIRE(e.size() >= 2);
  CHECK(std::holds_alternative<fx::Closed>(e[0]));
  auto closing = std::get<fx::Control>(e[1]).event;
  CHECK(closing.exit_code == 0);
  CHECK_FALSE(closing.failure);
  CHECK(closing.detail == "all 2 nodes succeeded");
  auto late = answers(core.on_join(member(c, "c"), t0 + 1s));
  CHECK(late["c"].closed);
  CHECK(late["c"].error == "the rendezvous of run 'job42' is closed");
}

TEST_CASE("core: nodes waiting when the job closes are answered that it closed", "[coordinator_core]") {
  auto c = config(1, 1);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a")}, t0);
  join_all(core, {member(c, "b")}, t0);  // waits: the round is full
  auto got = answers(core.on_report(0, "a", succeeded(), t0));
  REQUIRE(got.count("b") == 1);
  CHECK(got["b"].closed);
}

TEST_CASE("core: a lost participant ends the round; the survivors re-form without a restart", "[coordinator_core]") {
  auto c = config(2, 3);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a"), member(c, "b"), member(c, "c")}, t0);
  REQUIRE(core.round() == 0);
  auto e = core.on_alive_gone("c", t0 + 1s);
  auto ctl = all<fx::Control>(e);
  REQUIRE(ctl.size() == 1);
  CHECK_FALSE(ctl[0].event.failure);
  CHECK(ctl[0].event.restart_count == 0);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("node host-c (10.0.0.c, c) lost"));
  CHECK(logged(e, "rendezvous: lost node host-c"));
  auto gone = pruned(e);
  CHECK(std::find(gone.begin(), gone.end(), keys.answer("c", 1)) != gone.end());
  CHECK(std::find(gone.begin(), gone.end(), keys.join("c")) != gone.end());
  CHECK(std::find(gone.begin(), gone.end(), keys.heartbeat("c")) != gone.end());
  CHECK(core.on_alive_gone("c", t0 + 1s).empty());  // once

  // The two survivors are every node expected: the round forms at once, no last call.
  join_all(core, {member(c, "a", 2)}, t0 + 2s);
  auto got = answers(join_all(core, {member(c, "b", 2)}, t0 + 2s));
  REQUIRE(got.size() == 2);
  CHECK(got["a"].restart_count == 0);
  CHECK(got["a"].round == 1);
}

TEST_CASE("core: a node that joins again prunes its previous answer", "[coordinator_core]") {
  auto c = config(1, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a")}, t0);
  auto formed = core.on_timers(t0 + 31s);
  REQUIRE(answers(formed).size() == 1);
  auto again = core.on_join(member(c, "a", 2), t0 + 32s);
  auto gone = pruned(again);
  REQUIRE(!gone.empty());
  CHECK(gone[0] == keys.answer("a", 1));
  auto ctl = all<fx::Control>(again);  // its own rejoin ends the running round
  REQUIRE(ctl.size() == 1);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("rejoined"));
}

TEST_CASE("core: a late joiner with room scales the job up without a restart", "[coordinator_core]") {
  auto c = config(1, 3);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a")}, t0);
  core.on_timers(t0 + 31s);
  REQUIRE(core.round() == 0);
  auto e = join_all(core, {member(c, "b")}, t0 + 40s);
  auto ctl = all<fx::Control>(e);
  REQUIRE(ctl.size() == 1);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("joined: scaling up"));
  CHECK_FALSE(ctl[0].event.failure);
  auto got = answers(join_all(core, {member(c, "a", 2)}, t0 + 41s));  // every survivor is back
  REQUIRE(got.size() == 2);
  CHECK(got["a"].node_rank == 0);  // its previous rank
  CHECK(got["b"].restart_count == 0);
}

TEST_CASE("core: the heartbeat scan drops a silent node and ends its alive key", "[coordinator_core]") {
  auto c = config(2, 2);
  c.heartbeat_timeout = 8s;
  c.keep_alive_interval = 2s;
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a"), member(c, "b")}, t0);
  REQUIRE(core.next_deadline().has_value());
  core.on_timers(t0);  // the first scan: everyone was just seen
  CHECK(*core.next_deadline() == t0 + 2s);  // heartbeat_timeout / 4
  core.on_heartbeat("zz", t0 + 1s);  // not alive: ignored
  // b: silent for 10 s, heartbeat_timeout after its beat due at t0 + 2 s: not yet.
  CHECK(all<fx::EndAlive>(run_until(core, t0 + 10s, {"a"})).empty());
  auto e = run_until(core, t0 + 12s, {"a"});  // silent for 12 s
  auto ended = all<fx::EndAlive>(e);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].node_id == "b");
  REQUIRE(!all<fx::Control>(e).empty());
  CHECK_THAT(all<fx::Control>(e)[0].event.detail, Catch::Contains("no heartbeat for 10 s"));
  CHECK(core.on_alive_gone("b", t0 + 12s).empty());  // its alive key's deletion is no news
  CHECK_FALSE(core.alone());
  core.on_alive_gone("a", t0 + 13s);
  CHECK(core.alone());
}

// heartbeat_timeout 8 s, a heartbeat every 2 s; "host" is the hosting agent's own node.
struct StallJob {
  RendezvousConfig cfg = [] {
    auto c = config(2, 2);
    c.heartbeat_timeout = 8s;
    c.keep_alive_interval = 2s;
    return c;
  }();
  CoordinatorCore core{cfg, member(cfg, "host")};
  StallJob() {
    join_all(core, {member(cfg, "host"), member(cfg, "b")}, t0);
    REQUIRE(core.round() == 0);
    REQUIRE(all<fx::EndAlive>(run_until(core, t0 + 2s, {"host", "b"})).empty());  // last beats at t0 + 2 s
    REQUIRE(*core.next_deadline() == t0 + 4s);
  }
};

TEST_CASE("core: a node stalled for just under heartbeat_timeout is not lost", "[coordinator_core]") {
  StallJob job;
  // b beats at t0 + 3 s, stops at t0 + 4.9 s (its next beat due at t0 + 5 s) for 7.9 s and beats
  // when it resumes: silent for 9.8 s, 9 s of them at the scan at t0 + 12 s.
  auto e = job.core.on_heartbeat("b", t0 + 3s);
  append(e, run_until(job.core, t0 + 12800ms, {"host"}));
  append(e, job.core.on_heartbeat("b", t0 + 12800ms));
  append(e, run_until(job.core, t0 + 20s, {"host", "b"}));
  CHECK(all<fx::EndAlive>(e).empty());
  CHECK(all<fx::Control>(e).empty());
}

TEST_CASE("core: its own stall counts against no node, its own node least of all", "[coordinator_core]") {
  StallJob job;
  // The host stops at t0 + 3.9 s for 7.9 s; its timers run 0.3 s after it resumed, before the
  // heartbeats its stall held up (the host's own, b's) are delivered: 10.1 s after the last.
  auto e = job.core.on_timers(t0 + 12100ms);
  append(e, job.core.on_heartbeat("host", t0 + 12110ms));
  append(e, job.core.on_heartbeat("b", t0 + 12120ms));
  append(e, run_until(job.core, t0 + 20s, {"host", "b"}));
  CHECK(all<fx::EndAlive>(e).empty());
  CHECK(all<fx::Control>(e).empty());
  // Its scans go on as before: b silent from here is lost.
  auto later = run_until(job.core, t0 + 32s, {"host"});
  REQUIRE(all<fx::EndAlive>(later).size() == 1);
  CHECK(all<fx::EndAlive>(later)[0].node_id == "b");
}

TEST_CASE("core: a stall of the host past every agent's heartbeat wait closes the job with kExitStoreLost",
          "[coordinator_core]") {
  StallJob job;
  // Stopped from t0 + 2 s to t0 + 14 s: 10 s late, heartbeat_timeout + keep_alive_interval. b's
  // beat sent during the stall waited more than heartbeat_timeout: b has given up.
  auto e = job.core.on_timers(t0 + 14s);
  REQUIRE(find<fx::Closed>(e) != nullptr);
  auto ctl = all<fx::Control>(e);
  REQUIRE(ctl.size() == 1);
  CHECK(ctl[0].event.kind == ControlEvent::Kind::kClosed);
  CHECK(ctl[0].event.exit_code == kExitStoreLost);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("the store's host was stalled for 10.0 s") &&
                                      Catch::Contains("each has given up on the store"));
  CHECK(job.core.closed());
  CHECK(all<fx::EndAlive>(e).empty());
}

TEST_CASE("core: a stall that begins right after an event, before the timers ran, is its own too", "[coordinator_core]") {
  StallJob job;
  // The host's own beat is handled at t0 + 2.1 s, and the host stops before its timers run (due at
  // t0 + 4 s) until t0 + 14.1 s: 10.1 s late. Counted as b's silence, b would be "lost"; it is the
  // host's stall, past every agent's wait.
  auto e = job.core.on_heartbeat("host", t0 + 2100ms);
  append(e, job.core.on_timers(t0 + 14100ms));
  CHECK(all<fx::EndAlive>(e).empty());
  auto ctl = all<fx::Control>(e);
  REQUIRE(ctl.size() == 1);
  CHECK(ctl[0].event.exit_code == kExitStoreLost);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("the store's host was stalled for 10.1 s"));
}

TEST_CASE("core: a host stalled past every agent's wait, whose first news is a peer's closed connection, closes the job",
          "[coordinator_core]") {
  StallJob job;
  // b gave up on the stalled store and exited: its connection's end comes before the timers.
  auto e = job.core.on_alive_gone("b", t0 + 14s);
  REQUIRE(find<fx::Closed>(e) != nullptr);
  auto ctl = all<fx::Control>(e);
  REQUIRE(ctl.size() == 1);
  CHECK(ctl[0].event.kind == ControlEvent::Kind::kClosed);
  CHECK(ctl[0].event.exit_code == kExitStoreLost);
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("the store's host was stalled for 10.0 s"));
}

TEST_CASE("core: a host alone that stalls past the heartbeat wait goes on", "[coordinator_core]") {
  StallJob job;
  job.core.on_alive_gone("b", t0 + 2500ms);  // b left: the host's own node is the only one
  auto e = run_until(job.core, t0 + 3s, {"host"});
  append(e, job.core.on_timers(t0 + 20s));
  CHECK(find<fx::Closed>(e) == nullptr);
  CHECK_FALSE(job.core.closed());
}

TEST_CASE("core: progress lines while a round forms, at most one a second, only when changed", "[coordinator_core]") {
  auto c = config(2, 4);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a")}, t0);
  REQUIRE(core.next_deadline().has_value());
  auto first = all<fx::Progress>(core.on_timers(t0));
  REQUIRE(first.size() == 1);
  CHECK(first[0].line == "round 0: 1/2..4 nodes");
  join_all(core, {member(c, "b")}, t0 + 100ms);
  CHECK(all<fx::Progress>(core.on_timers(t0 + 500ms)).empty());  // within the second
  auto second = all<fx::Progress>(core.on_timers(t0 + 1s));
  REQUIRE(second.size() == 1);
  CHECK(second[0].line == "round 0: 2/2..4 nodes, last call in 30 s");
}

TEST_CASE("core: forming round r prunes the stop key, reports and round keys of round r - 2", "[coordinator_core]") {
  auto c = config(1, 1, 5);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {member(c, "a", 1)}, t0);
  core.on_report(0, "a", failed(1), t0);
  auto second = join_all(core, {member(c, "a", 2)}, t0);
  REQUIRE(core.round() == 1);
  CHECK(all<fx::PruneRound>(second).empty());  // no round before round -1
  core.on_report(1, "a", failed(1), t0);
  auto third = join_all(core, {member(c, "a", 3)}, t0);
  REQUIRE(core.round() == 2);
  auto gone = pruned(third);
  CHECK(gone == std::vector<std::string>{keys.answer("a", 2), keys.stop(0), keys.report(0, "a")});
  auto rounds = all<fx::PruneRound>(third);
  REQUIRE(rounds.size() == 1);
  CHECK(rounds[0].round == 0);
  // A report that arrives for a round already pruned is deleted as it comes.
  auto late = core.on_report(0, "b", failed(1), t0);
  REQUIRE(late.size() == 1);
  CHECK(std::get<fx::Prune>(late[0]).key == keys.report(0, "b"));
  // A malformed report is not acted on, but its key is pruned with its round.
  CHECK(core.on_report(2, "a", std::nullopt, t0).empty());
  CHECK_FALSE(core.closed());
  core.on_report(2, "b", failed(1), t0);  // not a participant: its key is still pruned later
  join_all(core, {member(c, "a", 4)}, t0);
  core.on_report(3, "a", failed(1), t0);
  auto fifth = join_all(core, {member(c, "a", 5)}, t0);
  REQUIRE(core.round() == 4);
  gone = pruned(fifth);
  CHECK(std::find(gone.begin(), gone.end(), keys.report(2, "a")) != gone.end());
  CHECK(std::find(gone.begin(), gone.end(), keys.report(2, "b")) != gone.end());
}

TEST_CASE("core: restarts that do not raise the highest step close the job with kExitNoProgress", "[coordinator_core]") {
  auto c = config(2, 2, 10);
  c.no_progress_limit = 2;
  CoordinatorCore core(c, std::nullopt);
  auto fail = [&](int round, const std::string& who, std::optional<std::int64_t> step, CoordinatorClock::time_point at) {
    RoundOutcome o = failed(13, "rep-" + who);
    o.highest_step = step;
    return core.on_report(round, who, o, at);
  };
  join_all(core, {member(c, "a"), member(c, "b")}, t0);
  REQUIRE(all<fx::Control>(fail(0, "a", 120, t0 + 1s)).at(0).event.kind == ControlEvent::Kind::kStop);
  join_all(core, {member(c, "a", 2), member(c, "b", 2)}, t0 + 2s);
  REQUIRE(all<fx::Control>(fail(1, "b", 120, t0 + 3s)).at(0).event.kind == ControlEvent::Kind::kStop);  // 1 in a row
  join_all(core, {member(c, "a", 3), member(c, "b", 3)}, t0 + 4s);
  auto close = fail(2, "a", std::nullopt, t0 + 5s);  // no beats at all: 2 in a row
  auto ctl = all<fx::Control>(close);
  REQUIRE(ctl.size() == 1);
  CHECK(ctl[0].event.kind == ControlEvent::Kind::kClosed);
  CHECK(ctl[0].event.exit_code == kExitNoProgress);
  CHECK(ctl[0].event.report == "rep-a");
  CHECK_THAT(ctl[0].event.detail, Catch::Contains("2 restarts in a row made no progress (highest step 120)"));
  CHECK(core.closed());
  CHECK(core.restart_count() == 2);
}

TEST_CASE("core: every answer carries each node's state endpoint in node-rank order; none without any", "[coordinator_core]") {
  auto c = config(3, 3);
  CoordinatorCore core(c, std::nullopt);
  NodeRecord a = member(c, "a", 1, 2), b = member(c, "b", 1, 0), v6 = member(c, "c", 1, 1);
  a.state_port = 4001;
  b.state_port = 4002;
  v6.addr = "fd00::3";
  v6.state_port = 4003;
  auto got = answers(join_all(core, {a, b, v6}, t0));
  REQUIRE(got.size() == 3);
  const std::vector<std::string> want{"10.0.0.b:4002", "[fd00::3]:4003", "10.0.0.a:4001"};
  CHECK(got["a"].state_endpoints == want);
  CHECK(got["b"].state_endpoints == want);
  CHECK(RoundAnswer::from_json(got["c"].to_json()).state_endpoints == want);

  CoordinatorCore plain(c, std::nullopt);
  auto none = answers(join_all(plain, {member(c, "a"), member(c, "b"), member(c, "c")}, t0));
  CHECK(none["a"].state_endpoints.empty());
  CHECK(none["a"].to_json().find("state_endpoints") == std::string::npos);  // nothing added to the wire
}

// ---- Exclusion and hot spares ----

namespace {

RendezvousConfig excluding(int min_nodes, int max_nodes, int exclude_after, std::chrono::milliseconds cooldown = 10s) {
  RendezvousConfig c = config(min_nodes, max_nodes, 10);
  c.exclude_after = exclude_after;
  c.exclude_cooldown = cooldown;
  return c;
}

NodeRecord excl_member(const RendezvousConfig& c, const std::string& id, int seq) {
  NodeRecord r = member(c, id, seq);
  r.exclude_after = c.exclude_after;
  r.exclude_cooldown_ms = c.exclude_cooldown.count();
  return r;
}

std::optional<ControlEvent> control(const CoordinatorEffects& effects) {
  auto ctl = all<fx::Control>(effects);
  if (ctl.empty()) return std::nullopt;
  return ctl.back().event;
}

}  // namespace

TEST_CASE("core: the root cause twice is excluded; the waiting spare takes its node rank at once", "[coordinator_core][exclusion]") {
  auto c = excluding(2, 2, 2);
  CoordinatorCore core(c, std::nullopt);
  auto r0 = answers(join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0));
  REQUIRE(r0["b"].node_rank == 1);
  CHECK(answers(join_all(core, {excl_member(c, "s", 1)}, t0)).empty());  // the spare waits: the round is full

  // First root cause: counted, nobody excluded; the same two nodes form round 1.
  auto first = core.on_report(0, "b", failed(1), t0 + 1s);
  CHECK_FALSE(logged(first, "excluded"));
  auto r1 = answers(join_all(core, {excl_member(c, "a", 2), excl_member(c, "b", 2)}, t0 + 2s));
  REQUIRE(r1.size() == 2);
  CHECK(r1["b"].node_rank == 1);
  CHECK(r1["a"].excluded.empty());

  // Second: b is excluded; the round ends with a restart that names it.
  auto second = core.on_report(1, "b", failed(1), t0 + 3s);
  CHECK(logged(second, "node host-b (10.0.0.b, b) excluded for 10 s (exclusion 1): the root cause 2 times"));
  auto stop = control(second);
  REQUIRE(stop);
  CHECK(stop->failure);
  CHECK(stop->restart_count == 2);
  CHECK(stop->detail.find("excluded for 10 s") != std::string::npos);

  // a alone is back with the spare waiting: the round forms at once (no last call), s in b's rank.
  auto formed = join_all(core, {excl_member(c, "a", 3)}, t0 + 4s);
  auto r2 = answers(formed);
  REQUIRE(r2.size() == 2);
  CHECK(r2["a"].node_rank == 0);
  CHECK(r2["s"].node_rank == 1);
  CHECK(r2["s"].restart_count == 2);
  REQUIRE(r2["a"].excluded.size() == 1);
  CHECK(r2["a"].excluded[0].node_id == "b");
  CHECK(r2["a"].excluded[0].hostname == "host-b");
  CHECK(r2["a"].excluded[0].times == 1);
  CHECK(r2["a"].excluded[0].until_unix_ms == std::chrono::duration_cast<std::chrono::milliseconds>((t0 + 13s).time_since_epoch()).count());
  CHECK(r2["a"].exclusions_total == 1);

  // b's own join is answered: excluded, for how long and why; it does not wait in the round.
  auto b = answers(join_all(core, {excl_member(c, "b", 3)}, t0 + 5s));
  REQUIRE(b.count("b"));
  CHECK(b["b"].excluded_for_ms == 8000);
  CHECK(b["b"].excluded_reason == "the root cause 2 times");
  CHECK(b["b"].error.find("is excluded until") != std::string::npos);
  CHECK_FALSE(b["b"].closed);
}

TEST_CASE("core: after its cooldown a node joins again; its next cooldown doubles", "[coordinator_core][exclusion]") {
  auto c = excluding(1, 2, 1);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0);
  auto ex = core.on_report(0, "b", failed(1), t0 + 1s);
  CHECK(logged(ex, "excluded for 10 s (exclusion 1)"));
  auto alone = answers(join_all(core, {excl_member(c, "a", 2)}, t0 + 2s));  // a alone reaches min_nodes 1
  REQUIRE(alone.size() == 1);
  CHECK(alone["a"].nnodes == 1);
  CHECK(answers(join_all(core, {excl_member(c, "b", 2)}, t0 + 3s))["b"].excluded_for_ms == 8000);

  // Cooldown over: b joins as any node (here it scales the job up again).
  auto back = join_all(core, {excl_member(c, "b", 3)}, t0 + 12s);
  CHECK(logged(back, "node host-b (10.0.0.b, b) joins again: its exclusion ended"));
  auto r = answers(join_all(core, {excl_member(c, "a", 3)}, t0 + 12s));
  REQUIRE(r.size() == 2);
  CHECK(r["b"].excluded.empty());
  CHECK(r["b"].exclusions_total == 1);

  // Its next exclusion lasts twice as long.
  auto again = core.on_report(core.round(), "b", failed(1), t0 + 13s);
  CHECK(logged(again, "excluded for 20 s (exclusion 2)"));
  join_all(core, {excl_member(c, "a", 4)}, t0 + 14s);
  CHECK(answers(join_all(core, {excl_member(c, "b", 4)}, t0 + 32s))["b"].excluded_for_ms == 1000);
  CHECK(answers(join_all(core, {excl_member(c, "b", 5)}, t0 + 34s))["b"].error.empty());
}

TEST_CASE("core: a node no other can replace is kept, and one line says so", "[coordinator_core][exclusion]") {
  auto c = excluding(2, 2, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0);
  core.on_report(0, "b", failed(1), t0 + 1s);
  join_all(core, {excl_member(c, "a", 2), excl_member(c, "b", 2)}, t0 + 2s);
  auto second = core.on_report(1, "b", failed(1), t0 + 3s);
  CHECK(logged(second, "node host-b (10.0.0.b, b) was the root cause 2 times; kept: no other node can replace it"));
  CHECK_FALSE(logged(second, "excluded for"));
  auto r = answers(join_all(core, {excl_member(c, "a", 3), excl_member(c, "b", 3)}, t0 + 4s));
  REQUIRE(r.size() == 2);
  CHECK(r["b"].error.empty());
  CHECK(r["b"].node_rank == 1);
}

TEST_CASE("core: exclude_after 0 never excludes", "[coordinator_core][exclusion]") {
  auto c = excluding(1, 2, 0);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0);
  for (int i = 0; i < 4; ++i) {
    auto e = core.on_report(core.round(), "b", failed(1), t0 + std::chrono::seconds(2 * i + 1));
    CHECK_FALSE(logged(e, "excluded"));
    CHECK_FALSE(logged(e, "kept"));
    auto r = answers(join_all(core, {excl_member(c, "a", i + 2), excl_member(c, "b", i + 2)}, t0 + std::chrono::seconds(2 * i + 2)));
    CHECK(r.size() == 2);
  }
}

TEST_CASE("core: a worker's exclude_request excludes its node at once, or closes the job with kExitNodeUnhealthy",
          "[coordinator_core][exclusion]") {
  auto c = excluding(2, 2, 5);
  SECTION("a spare can take its place") {
    CoordinatorCore core(c, std::nullopt);
    join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1), excl_member(c, "s", 1)}, t0);
    RoundOutcome o = failed(1);
    o.exclude_request = "XID 79 on GPU 3";
    auto e = core.on_report(0, "b", o, t0 + 1s);
    CHECK(logged(e, "excluded for 10 s (exclusion 1): a worker asked to exclude it: XID 79 on GPU 3"));
    auto r = answers(join_all(core, {excl_member(c, "a", 2), excl_member(c, "b", 2)}, t0 + 2s));
    CHECK(r["s"].node_rank == 1);
    CHECK(r["b"].excluded_reason == "a worker asked to exclude it: XID 79 on GPU 3");
  }
  SECTION("no node can replace it") {
    CoordinatorCore core(c, std::nullopt);
    join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0);
    RoundOutcome o = failed(1);
    o.exclude_request = "XID 79 on GPU 3";
    auto e = core.on_report(0, "b", o, t0 + 1s);
    CHECK(core.closed());
    auto closing = control(e);
    REQUIRE(closing);
    CHECK(closing->kind == ControlEvent::Kind::kClosed);
    CHECK(closing->exit_code == kExitNodeUnhealthy);
    CHECK(closing->detail.find("XID 79 on GPU 3") != std::string::npos);
    CHECK(closing->origin_node == "b");
  }
}

TEST_CASE("core: a worker's stop_request closes the job at once with its rank's exit code", "[coordinator_core][exclusion]") {
  auto c = excluding(2, 2, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1)}, t0);
  RoundOutcome o = failed(3);
  o.stop_request = "loss is NaN";
  auto e = core.on_report(0, "b", o, t0 + 1s);
  CHECK(core.closed());
  CHECK(core.restart_count() == 0);
  auto closing = control(e);
  REQUIRE(closing);
  CHECK(closing->kind == ControlEvent::Kind::kClosed);
  CHECK(closing->exit_code == 3);
  CHECK(closing->detail.find("asked to stop the job (exit code 3): loss is NaN") != std::string::npos);
}

TEST_CASE("core: a lost node's waiting spare takes its rank without a last call", "[coordinator_core][exclusion]") {
  auto c = excluding(2, 3, 2);
  CoordinatorCore core(c, std::nullopt);
  join_all(core, {excl_member(c, "a", 1), excl_member(c, "b", 1), excl_member(c, "c", 1)}, t0);  // max: at once
  join_all(core, {excl_member(c, "s", 1)}, t0);  // waits
  core.on_alive_gone("a", t0 + 1s);              // rank 0 lost
  join_all(core, {excl_member(c, "b", 2)}, t0 + 2s);
  auto r = answers(join_all(core, {excl_member(c, "c", 2)}, t0 + 2s));
  REQUIRE(r.size() == 3);  // b, c and the spare: max nodes, formed at once
  CHECK(r["s"].node_rank == 0);
  CHECK(r["b"].node_rank == 1);
  CHECK(r["c"].node_rank == 2);
}
