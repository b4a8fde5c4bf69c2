// The pre-flight check's verdict (--precheck, docs/operations.md "Pre-flight check"): which nodes
// are slow, from every rank's compute time.
//
// Contract
//   - judge_precheck(ranks, slowdown): a node's time is the slowest of its ranks' times; the
//     reference is the median over nodes, the lower of the two middle values when their number is
//     even (with two nodes, the faster one: a slow node is the anomaly, it must not pull the
//     reference towards itself); a node whose time is more than slowdown x that median is slow.
//     One node: never slow (nothing to compare with). Nodes in `nodes` sorted by group rank,
//     `slow` ascending. Pure: every rank, given the same times, gets the same verdict.
//   - verdict_json / the reason line: what crun-precheck writes for its agent and what the slow
//     node's request says.
//
// Threading
//   Pure functions.
#pragma once

#include <string>
#include <vector>

namespace crun::precheck {

struct RankTime {
  int group_rank = 0;   // the node the rank runs on
  double seconds = 0;   // its compute part
};

struct NodeTime {
  int group_rank = 0;
  double seconds = 0;
};

struct Verdict {
  std::vector<NodeTime> nodes;  // by group rank
  double median = 0;
  double slowdown = 2.0;
  std::vector<int> slow;        // group ranks of the slow nodes

  bool is_slow(int group_rank) const;
  double seconds_of(int group_rank) const;
};

Verdict judge_precheck(const std::vector<RankTime>& ranks, double slowdown);

// "precheck: 2.7x the median (0.81 s vs 0.30 s)"
std::string slow_reason(const Verdict& v, int group_rank);
// {"node":G,"seconds":..,"median":..,"slowdown":..,"allreduce_seconds":..,"slow":[..],"nodes":[[G,s],..]}
std::string verdict_json(const Verdict& v, int group_rank, double allreduce_seconds);

}  // namespace crun::precheck
