// The rendezvous records and key names, with no store: round trips, malformed input, mismatch.
// (Numbers out of their field's range and non-UTF-8 output: rendezvous_test.cc.)
#include <catch2/catch.hpp>

#include "rendezvous/rendezvous_records.h"

using namespace crun;

namespace {

NodeRecord sample_node() {
  NodeRecord r;
  r.node_id = "h1:42:abcd";
  r.hostname = "h1";
  r.addr = "10.1.2.3";
  r.free_port = 29501;
  r.rank_hint = 3;
  r.seq = 7;
  r.nproc = 8;
  r.role = "trainer";
  r.max_restarts = 2;
  r.min_nodes = 2;
  r.max_nodes = 4;
  r.program = "/usr/bin/python3 train.py";
  return r;
}

}  // namespace

TEST_CASE("records: a join record survives its JSON", "[records]") {
  const NodeRecord r = sample_node();
  const NodeRecord back = NodeRecord::from_json(r.to_json());
  CHECK(back.node_id == r.node_id);
  CHECK(back.hostname == r.hostname);
  CHECK(back.addr == r.addr);
  CHECK(back.free_port == r.free_port);
  CHECK(back.rank_hint == r.rank_hint);
  CHECK(back.seq == r.seq);
  CHECK(back.nproc == r.nproc);
  CHECK(back.role == r.role);
  CHECK(back.max_restarts == r.max_restarts);
  CHECK(back.min_nodes == r.min_nodes);
  CHECK(back.max_nodes == r.max_nodes);
  CHECK(back.program == r.program);
  CHECK(back.mismatch(r).empty());
}

TEST_CASE("records: answers, outcomes and control events survive their JSON", "[records]") {
  RoundAnswer a;
  a.round = 4;
  a.restart_count = 1;
  a.node_rank = 2;
  a.nnodes = 3;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  RoundAnswer ab = RoundAnswer::from_json(a.to_json());
  CHECK(ab.error.empty());
  CHECK_FALSE(ab.closed);
  CHECK(ab.round == 4);
  CHECK(ab.restart_count == 1);
  CHECK(ab.node_rank == 2);
  CHECK(ab.nnodes == 3);
  CHECK(ab.master_addr == "10.0.0.1");
  CHECK(ab.master_port == 29500);
  RoundAnswer rejected;
  rejected.error = "closed";
  rejected.closed = true;
  RoundAnswer rb = RoundAnswer::from_json(rejected.to_json());
  CHECK(rb.error == "closed");
  CHECK(rb.closed);

  RoundOutcome o;
  o.exit_code = 137;
  o.wall_time_us = 1'700'000'000'000'000;
  o.report = "{\"message\":\"boom\"}";
  RoundOutcome ob = RoundOutcome::from_json(o.to_json());
  CHECK_FALSE(ob.succeeded);
  CHECK(ob.exit_code == 137);
  CHECK(ob.wall_time_us == o.wall_time_us);
  CHECK(ob.report == o.report);
  CHECK_FALSE(ob.highest_step);  // no beats: the field is left out
  CHECK(o.to_json().find("highest_step") == std::string::npos);
  o.highest_step = 1LL << 40;
  CHECK(RoundOutcome::from_json(o.to_json()).highest_step == (1LL << 40));
  CHECK_THROWS_WITH(RoundOutcome::from_json(R"({"succeeded": false, "exit_code": 1, "wall_time_us": 0, "report": "", "highest_step": "x"})"),
                    Catch::Contains("highest_step"));

  for (auto kind : {ControlEvent::Kind::kStop, ControlEvent::Kind::kClosed}) {
    ControlEvent e;
    e.kind = kind;
    e.round = 5;
    e.restart_count = 2;
    e.failure = true;
    e.exit_code = 9;
    e.detail = "worker failure";
    e.origin_node = "h2:1:x";
    e.report = "{}";
    ControlEvent eb = ControlEvent::from_json(e.to_json());
    CHECK(eb.kind == kind);
    CHECK(eb.round == 5);
    CHECK(eb.restart_count == 2);
    CHECK(eb.failure);
    CHECK(eb.exit_code == 9);
    CHECK(eb.detail == "worker failure");
    CHECK(eb.origin_node == "h2:1:x");
    CHECK(eb.report == "{}");
  }
}

TEST_CASE("records: malformed input is std::invalid_argument naming the record and field", "[records]") {
  CHECK_THROWS_AS(NodeRecord::from_json("not json"), std::invalid_argument);
  CHECK_THROWS_WITH(NodeRecord::from_json("not json"), Catch::Contains("malformed join record"));
  CHECK_THROWS_WITH(NodeRecord::from_json("[1, 2]"), Catch::Contains("join record is not a JSON object"));
  CHECK_THROWS_WITH(RoundAnswer::from_json("{}"), Catch::Contains("answer record lacks 'error'"));
  CHECK_THROWS_WITH(RoundOutcome::from_json("{\"succeeded\": 1}"), Catch::Contains("outcome record has a bad 'succeeded'"));
  std::string node = sample_node().to_json();
  node.replace(node.find("\"h1\""), 4, "17");  // hostname: a number
  CHECK_THROWS_WITH(NodeRecord::from_json(node), Catch::Contains("join record has a bad 'hostname'"));
  ControlEvent e;
  std::string control = e.to_json();
  control.replace(control.find("\"stop\""), 6, "\"pause\"");
  CHECK_THROWS_AS(ControlEvent::from_json(control), std::invalid_argument);
  CHECK_THROWS_WITH(ControlEvent::from_json(control), Catch::Contains("unknown kind 'pause'"));
  CHECK_THROWS_AS(ControlEvent::from_json(""), std::invalid_argument);
}

TEST_CASE("records: mismatch names every differing field, and only those", "[records]") {
  const NodeRecord a = sample_node();
  NodeRecord b = a;
  b.node_id = "other";  // identity, address, port, hint and seq never count
  b.hostname = "h2";
  b.addr = "10.9.9.9";
  b.free_port = 1;
  b.rank_hint = 0;
  b.seq = 1;
  CHECK(a.mismatch(b).empty());
  b.nproc = 4;
  CHECK(a.mismatch(b) == "nproc 8 vs 4");
  b.role = "eval";
  b.max_restarts = 0;
  b.min_nodes = 1;
  b.program = "b.out";
  CHECK(a.mismatch(b) == "nproc 8 vs 4, role trainer vs eval, max-restarts 2 vs 0, nnodes 2:4 vs 1:4, "
                         "program /usr/bin/python3 train.py vs b.out");
  CHECK(b.mismatch(a) == "nproc 4 vs 8, role eval vs trainer, max-restarts 0 vs 2, nnodes 1:4 vs 2:4, "
                         "program b.out vs /usr/bin/python3 train.py");
  // Exclusion's settings too: with etcd-v3 every agent decides by its own.
  NodeRecord c = a;
  c.exclude_after = 0;
  c.exclude_cooldown_ms = 3000;
  CHECK(a.mismatch(c) == "exclude-after 2 vs 0, exclude-cooldown 600 s vs 3 s");
  CHECK(NodeRecord::from_json(c.to_json()).mismatch(c).empty());
}

TEST_CASE("records: the exclusion fields of answers and of the etcd round record round-trip", "[records]") {
  RoundAnswer a;
  a.error = "excluded";
  a.excluded_for_ms = 2500;
  a.excluded_reason = "the root cause 2 times";
  a.excluded = {{"n1", "h1", "10.0.0.1", "why", 2, 1795659816000}};
  a.exclusions_total = 3;
  const RoundAnswer back = RoundAnswer::from_json(a.to_json());
  CHECK(back.excluded_for_ms == 2500);
  CHECK(back.excluded_reason == a.excluded_reason);
  REQUIRE(back.excluded.size() == 1);
  CHECK(back.excluded[0].until_unix_ms == 1795659816000);
  CHECK(back.excluded[0].times == 2);
  CHECK(back.exclusions_total == 3);
  EtcdRoundRecord r;
  r.excluded = a.excluded;
  r.root_causes = {{"n2", 1}};
  r.exclusions_total = 1;
  r.previous = {"n1", "n2"};
  const EtcdRoundRecord rb = EtcdRoundRecord::from_json(r.to_json());
  CHECK(rb.excluded.at(0).reason == "why");
  CHECK(rb.root_causes.at("n2") == 1);
  CHECK(rb.previous == r.previous);
  CHECK(rb.exclusions_total == 1);
  CHECK_THROWS_WITH(EtcdRoundRecord::from_json(R"({"phase":"forming","round":0,"restart_count":0,"expected":[],)"
                                                 R"("participants":[],"master_addr":"","master_port":0,"reference":"",)"
                                                 R"("no_progress_streak":0,"excluded":[{"node_id":1}]})"),
                    Catch::Contains("round record"));
  ControlEvent e;
  e.excluded = "excluded for 600 s (exclusion 1): why";
  CHECK(ControlEvent::from_json(e.to_json()).excluded == e.excluded);
}

TEST_CASE("records: every key of a run lives under crun/rdzv/<run>/", "[records]") {
  RendezvousKeys k("job7");
  CHECK(k.join("n1") == "crun/rdzv/job7/join/n1");
  CHECK(k.answer("n1", 3) == "crun/rdzv/job7/answer/n1/3");
  CHECK(k.alive("n1") == "crun/rdzv/job7/alive/n1");
  CHECK(k.heartbeat("n1") == "crun/rdzv/job7/hb/n1");
  CHECK(k.report(2, "n1") == "crun/rdzv/job7/report/2/n1");
  CHECK(k.stop(2) == "crun/rdzv/job7/ctl/stop/2");
  CHECK(k.closed() == "crun/rdzv/job7/ctl/closed");
  CHECK(k.round_prefix(2) == "crun/rdzv/job7/round/2/");
  CHECK(k.stacks(2, 1) == "crun/rdzv/job7/round/2/stacks/1");  // pruned with its round
}

TEST_CASE("records: a node's state port survives its JSON; a record without one reads as none", "[records]") {
  NodeRecord r = sample_node();
  r.state_port = 40123;
  CHECK(NodeRecord::from_json(r.to_json()).state_port == 40123);
  r.state_port = 0;
  std::string text = r.to_json();
  const auto at = text.find(",\"state_port\":0");
  REQUIRE(at != std::string::npos);
  text.erase(at, std::string(",\"state_port\":0").size());
  CHECK(NodeRecord::from_json(text).state_port == 0);
  CHECK(state_endpoint(r).empty());
}
