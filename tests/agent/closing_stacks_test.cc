// agent/closing_stacks: a node's stacks record through JSON and back, what is refused, and node
// rank 0's tally of one round (who is in, who is missing, which groups count).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "agent/closing_stacks.h"

using namespace crun;

namespace {

StackGroups groups_of(int attempt, std::vector<std::pair<int, std::string>> rank_place) {
  std::vector<RankStack> stacks;
  for (auto& [rank, place] : rank_place) {
    RankStack s;
    s.rank = rank;
    s.python_threads = {{place, "main (train.py:80)"}};
    stacks.push_back(std::move(s));
  }
  return group_stacks(stacks, attempt);
}

StacksRecord record(int round, int node_rank, StackGroups g) {
  return StacksRecord{round, node_rank, "h" + std::to_string(node_rank) + ":42:0badcafe", "h" + std::to_string(node_rank), std::move(g)};
}

}  // namespace

TEST_CASE("closing stacks: a record reads back as written, an empty one too", "[closing_stacks]") {
  const StacksRecord r = record(3, 1, groups_of(2, {{4, "all_reduce (train.py:40)"}, {5, "read (loader.py:9)"}}));
  const auto back = StacksRecord::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->round == 3);
  CHECK(back->node_rank == 1);
  CHECK(back->node_id == r.node_id);
  CHECK(back->host == "h1");
  CHECK(back->groups == r.groups);
  StackGroups none;
  none.attempt = 2;
  const auto empty = StacksRecord::from_json(record(3, 1, none).to_json());
  REQUIRE(empty);
  CHECK(empty->groups.empty());
  CHECK(empty->groups.attempt == 2);
}

TEST_CASE("closing stacks: anything but a record is refused with the reason", "[closing_stacks]") {
  std::string why;
  CHECK_FALSE(StacksRecord::from_json("not json", &why));
  CHECK(why == "stacks record: not a JSON object");
  CHECK_FALSE(StacksRecord::from_json(R"({"round":-1,"node_rank":1,"node_id":"a","host":"h","stack_groups":{}})", &why));
  CHECK(why == "stacks record: round is not a whole number >= 0");
  CHECK_FALSE(StacksRecord::from_json(R"({"round":1,"node_rank":1.5,"node_id":"a","host":"h","stack_groups":{}})", &why));
  CHECK(why == "stacks record: node_rank is not a whole number >= 0");
  CHECK_FALSE(StacksRecord::from_json(R"({"round":1,"node_rank":1,"node_id":7,"host":"h","stack_groups":{}})", &why));
  CHECK(why.find("node_id is not a string") != std::string::npos);
  CHECK_FALSE(StacksRecord::from_json(R"({"round":1,"node_rank":1,"node_id":"a","host":")" + std::string(513, 'x') +
                                          R"(","stack_groups":{}})", &why));
  CHECK(why.find("host is not a string of at most 512 bytes") != std::string::npos);
  CHECK_FALSE(StacksRecord::from_json(R"({"round":1,"node_rank":1,"node_id":"a","host":"h","stack_groups":null})", &why));
  CHECK(why == "stacks record: stack_groups is not an object");
  CHECK_FALSE(StacksRecord::from_json(R"({"round":1,"node_rank":1,"node_id":"a","host":"h","stack_groups":{"attempt":0}})", &why));
  CHECK(why.rfind("stacks record: stack groups: ", 0) == 0);  // StackGroups' own reason
  CHECK_FALSE(StacksRecord::from_json(std::string(2 * kMaxJsonBytes + 1, ' '), &why));
  CHECK(why.find("longer than") != std::string::npos);
}

TEST_CASE("closing stacks: node rank 0's tally of a round", "[closing_stacks]") {
  StacksGathering g(5, 1, 4, 0);
  CHECK_FALSE(g.complete());
  CHECK(g.in() == std::vector<int>{0});
  CHECK(g.missing() == std::vector<int>{1, 2, 3});
  // Another round's record, another node rank's, a node rank outside the round, not a record:
  // nothing counts.
  CHECK_FALSE(g.arrived(1, record(4, 1, groups_of(1, {{4, "a (t.py:1)"}})).to_json()));
  CHECK_FALSE(g.arrived(1, record(5, 2, groups_of(1, {{4, "a (t.py:1)"}})).to_json()));
  CHECK_FALSE(g.arrived(4, record(5, 4, groups_of(1, {{4, "a (t.py:1)"}})).to_json()));
  CHECK_FALSE(g.arrived(0, record(5, 0, groups_of(1, {{0, "a (t.py:1)"}})).to_json()));  // itself: in already
  CHECK_FALSE(g.arrived(1, "{}"));
  CHECK(g.missing() == std::vector<int>{1, 2, 3});
  // Node 1's groups count; node 2's empty record counts it in with no groups; node 3's of an
  // older start of the group counts it in, its groups left out.
  CHECK(g.arrived(1, record(5, 1, groups_of(1, {{4, "a (t.py:1)"}, {5, "b (t.py:2)"}})).to_json()));
  CHECK_FALSE(g.arrived(1, record(5, 1, groups_of(1, {{4, "a (t.py:1)"}})).to_json()));  // once
  StackGroups none;
  none.attempt = 1;
  CHECK(g.arrived(2, record(5, 2, none).to_json()));
  CHECK(g.missing() == std::vector<int>{3});
  CHECK(g.arrived(3, record(5, 3, groups_of(0, {{12, "a (t.py:1)"}})).to_json()));
  CHECK(g.complete());
  CHECK(g.missing().empty());
  CHECK(g.in() == std::vector<int>{0, 1, 2, 3});
  REQUIRE(g.parts().size() == 1);
  CHECK(g.parts()[0].rank_count() == 2);
}
