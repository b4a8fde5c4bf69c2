// What grouping the stacks before a kill costs (docs/benchmarks.md, "Stacks grouped across
// ranks"): group_stacks on one node's ranks and on a whole job's, merge_stack_groups of every
// node's grouped form on node rank 0, and the bytes each sends; beside it, the anchor: the raw
// stacks of the same ranks as JSON (what sending every rank's stacks to node rank 0 would be).
//
//   stack_groups_cost [ROUNDS]   (default 21): medians of ROUNDS runs of each, interleaved
//
// The stacks: each rank a Python worker (a 40-frame main thread and 4 other threads of 20
// frames) plus 12 native threads of 30 frames; one rank in 64 is elsewhere.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/stack_groups.h"

using namespace crun;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

RankStack rank_stack(int rank) {
  RankStack s;
  s.rank = rank;
  s.local_rank = rank % 8;
  s.pid = 10000 + rank;
  std::vector<std::string> main_thread;
  for (int f = 0; f < 40; ++f) main_thread.push_back("layer_" + std::to_string(f) + " (model/train.py:" + std::to_string(100 + f) + ")");
  if (rank % 64 == 7) main_thread[0] = "read (torch/utils/data/dataloader.py:1203)";
  s.python_threads.push_back(main_thread);
  for (int t = 0; t < 4; ++t) {
    std::vector<std::string> frames;
    for (int f = 0; f < 20; ++f) frames.push_back("wait_" + std::to_string(f) + " (threading.py:" + std::to_string(300 + f) + ")");
    s.python_threads.push_back(frames);
  }
  for (int t = 0; t < 12; ++t) {
    std::vector<std::string> frames;
    for (int f = 0; f < 30; ++f) frames.push_back("0x7f00" + std::to_string(rank) + " c10d::ProcessGroupNCCL::work_" + std::to_string(f));
    s.threads.push_back(frames);
  }
  return s;
}

std::string raw_json(const std::vector<RankStack>& stacks) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& s : stacks) j.push_back({{"rank", s.rank}, {"threads", s.threads}, {"python_threads", s.python_threads}});
  return j.dump();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 21;
  const int per_node = 8;
  const int nodes = 128;
  std::vector<std::vector<RankStack>> node_stacks(nodes);
  for (int n = 0; n < nodes; ++n) {
    for (int l = 0; l < per_node; ++l) node_stacks[n].push_back(rank_stack(n * per_node + l));
  }
  std::vector<RankStack> all;
  for (const auto& n : node_stacks) all.insert(all.end(), n.begin(), n.end());
  std::vector<double> node_group, node_raw, merge_all, group_all, raw_all;
  std::size_t node_bytes = 0, node_raw_bytes = 0, merged_bytes = 0, all_raw_bytes = 0;
  std::vector<StackGroups> parts;
  for (const auto& n : node_stacks) parts.push_back(group_stacks(n, 0));
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    const auto g = group_stacks(node_stacks[1], 0);
    const std::string text = g.to_json();
    auto t1 = Clock::now();
    const std::string raw = raw_json(node_stacks[1]);
    auto t2 = Clock::now();
    const auto merged = merge_stack_groups(parts);
    const std::string merged_text = merged.to_json();
    auto t3 = Clock::now();
    const auto whole = group_stacks(all, 0);
    auto t4 = Clock::now();
    const std::string all_raw = raw_json(all);
    auto t5 = Clock::now();
    if (!(merged == whole) || merged.groups.size() != 2) {
      std::fprintf(stderr, "merge differs from grouping every rank at once\n");
      return 1;
    }
    node_bytes = text.size();
    node_raw_bytes = raw.size();
    merged_bytes = merged_text.size();
    all_raw_bytes = all_raw.size();
    const auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    node_group.push_back(us(t0, t1));
    node_raw.push_back(us(t1, t2));
    merge_all.push_back(us(t2, t3));
    group_all.push_back(us(t3, t4));
    raw_all.push_back(us(t4, t5));
  }
  std::printf("medians of %d runs, interleaved\n", rounds);
  std::printf("%-52s %10s %10s\n", "", "us", "bytes");
  std::printf("%-52s %10.1f %10zu\n", "one node (8 ranks): group_stacks + to_json", median(node_group), node_bytes);
  std::printf("%-52s %10.1f %10zu   (anchor)\n", "one node (8 ranks): raw stacks as JSON", median(node_raw), node_raw_bytes);
  std::printf("%-52s %10.1f %10zu\n", "node rank 0: merge 128 nodes' groups + to_json", median(merge_all), merged_bytes);
  std::printf("%-52s %10.1f\n", "1,024 ranks grouped at once (group_stacks)", median(group_all));
  std::printf("%-52s %10.1f %10zu   (anchor)\n", "1,024 ranks' raw stacks as JSON", median(raw_all), all_raw_bytes);
  std::printf("ratio, one node's grouped bytes / raw bytes: %.4f; merge time / raw JSON of 1,024 ranks: %.3f\n",
              static_cast<double>(node_bytes) / static_cast<double>(node_raw_bytes), median(merge_all) / median(raw_all));
  return 0;
}
