#include "rendezvous/node_order.h"

#include <algorithm>
#include <climits>
#include <tuple>

#include "rendezvous/rendezvous_records.h"

namespace crun {

std::vector<const NodeRecord*> order_nodes(std::vector<const NodeRecord*> nodes,
                                           const std::map<std::string, int>& previous_rank, int max_nodes) {
  const auto key = [&](const NodeRecord* r) {
    const auto prev = previous_rank.find(r->node_id);
    return std::tuple<int, int, const std::string&>(r->rank_hint >= 0 ? r->rank_hint : INT_MAX,
                                                    prev != previous_rank.end() ? prev->second : INT_MAX, r->node_id);
  };
  std::sort(nodes.begin(), nodes.end(), [&](const NodeRecord* a, const NodeRecord* b) { return key(a) < key(b); });
  if (max_nodes >= 0 && nodes.size() > static_cast<std::size_t>(max_nodes)) nodes.resize(static_cast<std::size_t>(max_nodes));
  return nodes;
}

}  // namespace crun
