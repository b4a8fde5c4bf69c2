// Node-rank order: rank hint, then the previous round's rank kept, newcomers into the holes; cut to max_nodes.
#include <catch2/catch.hpp>

#include "rendezvous/node_order.h"
#include "rendezvous/rendezvous_records.h"

using crun::NodeRecord;
using crun::order_nodes;

namespace {

NodeRecord node(const std::string& id, int rank_hint = -1) {
  NodeRecord r;
  r.node_id = id;
  r.rank_hint = rank_hint;
  return r;
}

std::vector<std::string> ids(const std::vector<const NodeRecord*>& nodes) {
  std::vector<std::string> out;
  for (const auto* n : nodes) out.push_back(n->node_id);
  return out;
}

}  // namespace

TEST_CASE("with nothing else to go by, node ids decide", "[node_order]") {
  const NodeRecord c = node("c"), a = node("a"), b = node("b");
  CHECK(ids(order_nodes({&c, &a, &b}, {}, 8)) == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("a rank hint comes first, and every hinted node before any without one", "[node_order]") {
  const NodeRecord a = node("a"), b = node("b", 1), c = node("c", 0), d = node("d");
  // a was rank 0 last round, yet hints outrank history.
  CHECK(ids(order_nodes({&a, &b, &c, &d}, {{"a", 0}}, 8)) == std::vector<std::string>{"c", "b", "a", "d"});
}

TEST_CASE("survivors keep their order from the previous round; newcomers follow", "[node_order]") {
  const NodeRecord a = node("a"), b = node("b"), c = node("c"), z = node("z");
  const std::map<std::string, int> previous{{"z", 0}, {"c", 1}, {"a", 2}};
  CHECK(ids(order_nodes({&a, &b, &c, &z}, previous, 8)) == std::vector<std::string>{"z", "c", "a", "b"});
}

TEST_CASE("only the first max_nodes in order get a rank; the order does not depend on the input's", "[node_order]") {
  const NodeRecord a = node("a"), b = node("b"), c = node("c", 0);
  CHECK(ids(order_nodes({&a, &b, &c}, {}, 2)) == std::vector<std::string>{"c", "a"});
  CHECK(ids(order_nodes({&b, &c, &a}, {}, 2)) == std::vector<std::string>{"c", "a"});
  CHECK(order_nodes({}, {}, 2).empty());
}

TEST_CASE("a newcomer takes the rank of the node it replaces; survivors keep theirs", "[node_order]") {
  // a was rank 0 and is gone; the spare s comes in: it takes rank 0, b stays rank 1.
  const NodeRecord b = node("b"), s = node("s");
  CHECK(ids(order_nodes({&b, &s}, {{"a", 0}, {"b", 1}}, 2)) == std::vector<std::string>{"s", "b"});
  // Two holes, two newcomers: by node id into the free ranks, in rank order.
  const NodeRecord c = node("c"), x = node("x"), y = node("y");
  CHECK(ids(order_nodes({&y, &x, &c}, {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}, 4)) ==
        std::vector<std::string>{"x", "y", "c"});
}

TEST_CASE("a shrink: a survivor whose rank is past the round's size takes a hole", "[node_order]") {
  // b (rank 1) is gone and no spare came: a keeps 0, c keeps 2, d's rank 3 is past the new size 3.
  const NodeRecord a = node("a"), c = node("c"), d = node("d");
  CHECK(ids(order_nodes({&a, &c, &d}, {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}}, 8)) ==
        std::vector<std::string>{"a", "d", "c"});
  // Rank 0 gone: the survivor past the size takes it; nobody is left without a rank.
  const NodeRecord b = node("b");
  CHECK(ids(order_nodes({&b, &c}, {{"a", 0}, {"b", 1}, {"c", 2}}, 8)) == std::vector<std::string>{"c", "b"});
}

TEST_CASE("more nodes than max: survivors are in before newcomers, then newcomers by id", "[node_order]") {
  const NodeRecord a = node("a"), b = node("b"), s = node("s"), t = node("t");
  // a and b ran; the spares s and t wait: a round of 3 keeps a and b where they were, s fills rank 2.
  CHECK(ids(order_nodes({&t, &s, &b, &a}, {{"a", 1}, {"b", 0}}, 3)) == std::vector<std::string>{"b", "a", "s"});
}
