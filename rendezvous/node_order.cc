#include "rendezvous/node_order.h"

#include <algorithm>
#include <climits>
#include <tuple>

#include "rendezvous/rendezvous_records.h"

namespace crun {

std::vector<const NodeRecord*> order_nodes(std::vector<const NodeRecord*> nodes,
                                           const std::map<std::string, int>& previous_rank, int max_nodes) {
  const auto previous = [&](const NodeRecord* r) {
    const auto prev = previous_rank.find(r->node_id);
    return prev != previous_rank.end() ? prev->second : INT_MAX;
  };
  const auto key = [&](const NodeRecord* r) {
    return std::tuple<int, int, const std::string&>(r->rank_hint >= 0 ? r->rank_hint : INT_MAX, previous(r), r->node_id);
  };
  std::sort(nodes.begin(), nodes.end(), [&](const NodeRecord* a, const NodeRecord* b) { return key(a) < key(b); });
  if (max_nodes >= 0 && nodes.size() > static_cast<std::size_t>(max_nodes)) nodes.resize(static_cast<std::size_t>(max_nodes));
  const std::size_t n = nodes.size();
  std::vector<const NodeRecord*> ranked(n, nullptr);
  std::vector<const NodeRecord*> displaced, newcomers, rest;
  std::size_t next = 0;  // the hinted nodes take the first ranks, in hint order
  for (const NodeRecord* r : nodes) {
    if (r->rank_hint >= 0) ranked[next++] = r;
  }
  for (const NodeRecord* r : nodes) {
    if (r->rank_hint >= 0) continue;
    const int p = previous(r);
    if (p == INT_MAX) newcomers.push_back(r);
    else if (static_cast<std::size_t>(p) >= n) rest.push_back(r);
    else if (ranked[static_cast<std::size_t>(p)] == nullptr) ranked[static_cast<std::size_t>(p)] = r;
    else displaced.push_back(r);  // a hinted node holds its rank
  }
  // `nodes` is sorted: newcomers by node id, the others by previous rank.
  std::size_t slot = 0;
  for (const auto* list : {&displaced, &newcomers, &rest}) {
    for (const NodeRecord* r : *list) {
      while (ranked[slot] != nullptr) ++slot;
      ranked[slot] = r;
    }
  }
  return ranked;
}

}  // namespace crun
