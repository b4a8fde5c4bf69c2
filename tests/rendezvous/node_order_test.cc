// Node-rank order: rank hint, then the previous round's rank, then node id; cut to max_nodes.
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
