// Node-rank order: which node of a forming round gets which node rank. One rule, used by c10d's
// coordinator (rendezvous/coordinator_core.cc) and by each etcd-v3 agent that freezes a round
// (rendezvous/etcd_round_core.cc).
//
// Contract
//   order_nodes(nodes, previous_rank, max_nodes) returns `nodes` in node-rank order, cut to the
//   round's size n = min(nodes, max_nodes).
//     - Who is in: the first n by rank hint (--node-rank, SLURM_NODEID; a node without one, -1,
//       comes after every node with one), then by the node's rank in the previous round
//       (`previous_rank`; a node absent from it comes after every node in it), then by node id.
//     - Who gets which rank: the nodes with a rank hint take the first ranks, in hint order (as
//       the hint asks); then a node of the previous round keeps its rank when it is free and < n
//       (survivors stay where they were, so ranks and per-rank state stay with them); then
//       a node whose previous rank a hinted node holds, by previous rank; then newcomers fill the free ranks (the holes a lost or excluded node left), by node id; then
//       the rest (previous ranks >= n after a shrink), by previous rank, take what is left.
//   The order is total (node ids are unique), so every decider that sees the same nodes computes
//   the same ranks. Node rank 0's address and free port become the round's master (its
//   callers'). The pointers are the caller's and are not kept.
//
// Threading
//   Pure function; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace crun {

struct NodeRecord;

std::vector<const NodeRecord*> order_nodes(std::vector<const NodeRecord*> nodes,
                                           const std::map<std::string, int>& previous_rank, int max_nodes);

}  // namespace crun
