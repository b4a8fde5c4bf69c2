// Closing stacks: every node's stacks before the kill reach node rank 0 when the job closes
// (docs/operations.md, "Grouped across ranks"). A node's /status record goes with the node, so
// each node also writes its grouped stacks of the round on a key of their own
// (Rendezvous::publish_stacks: c10d, under the round's prefix; etcd-v3, under a lease of its
// own), and node rank 0, before it exits after a close, waits for every other node's within a
// bound (agent.cc: hold_exit).
//
// Contract
//   - StacksRecord: what one node writes for one round: the round, its node rank, node id and
//     host, and its ranks' StackGroups (agent/stack_groups.h; empty when it had nothing to take:
//     capture off, no worker running). to_json() is compact, within kMaxJsonBytes of the groups
//     plus the few fields; from_json() returns nullopt for anything else (not JSON, a field missing
//     or of the wrong type, a node id or host past 512 bytes, groups that StackGroups::
//     from_json refuses), with the first reason in `why` when given.
//   - StacksGathering: node rank 0's tally of one round: `node_count` nodes, itself in already;
//     arrived(node_rank, text) takes a record that is that node's of that round (returns false
//     and counts nothing for any other: a stale round, another node rank, not a record, or a node
//     already in); complete() when every node is in; missing() and in() list node ranks, ascending;
//     parts() the groups that arrived, of the attempt given (others are left out: a record of an
//     older start of the group).
//
// Threading
//   Value types; any thread.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/stack_groups.h"

namespace crun {

struct StacksRecord {
  int round = 0;
  int node_rank = 0;
  std::string node_id;
  std::string host;
  StackGroups groups;

  std::string to_json() const;
  static std::optional<StacksRecord> from_json(std::string_view text, std::string* why = nullptr);
};

class StacksGathering {
 public:
  StacksGathering(int round, int attempt, int node_count, int self_rank);

  bool arrived(int node_rank, std::string_view text);
  bool complete() const { return static_cast<int>(in_.size()) >= node_count_; }
  std::vector<int> missing() const;
  std::vector<int> in() const { return {in_.begin(), in_.end()}; }
  const std::vector<StackGroups>& parts() const { return parts_; }
  int round() const { return round_; }

 private:
  int round_;
  int attempt_;
  int node_count_;
  std::set<int> in_;
  std::vector<StackGroups> parts_;
};

}  // namespace crun
