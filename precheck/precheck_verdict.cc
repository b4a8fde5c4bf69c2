#include "precheck/precheck_verdict.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace crun::precheck {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", x);
  return buf;
}

}  // namespace

bool Verdict::is_slow(int group_rank) const { return std::find(slow.begin(), slow.end(), group_rank) != slow.end(); }

double Verdict::seconds_of(int group_rank) const {
  for (const auto& n : nodes) {
    if (n.group_rank == group_rank) return n.seconds;
  }
  return 0;
}

Verdict judge_precheck(const std::vector<RankTime>& ranks, double slowdown) {
  Verdict v;
  v.slowdown = slowdown;
  std::map<int, double> slowest;
  for (const auto& r : ranks) {
    auto [it, fresh] = slowest.emplace(r.group_rank, r.seconds);
    if (!fresh) it->second = std::max(it->second, r.seconds);
  }
  for (const auto& [g, s] : slowest) v.nodes.push_back({g, s});
  if (v.nodes.empty()) return v;
  std::vector<double> times;
  for (const auto& n : v.nodes) times.push_back(n.seconds);
  std::sort(times.begin(), times.end());
  v.median = times[(times.size() - 1) / 2];
  if (v.nodes.size() < 2) return v;
  for (const auto& n : v.nodes) {
    if (n.seconds > slowdown * v.median) v.slow.push_back(n.group_rank);
  }
  return v;
}

std::string slow_reason(const Verdict& v, int group_rank) {
  const double t = v.seconds_of(group_rank);
  return "precheck: " + number(v.median > 0 ? t / v.median : 0) + "x the median (" + number(t) + " s vs " +
         number(v.median) + " s)";
}

std::string verdict_json(const Verdict& v, int group_rank, double allreduce_seconds) {
  std::string j = "{\"node\":" + std::to_string(group_rank) + ",\"seconds\":" + number(v.seconds_of(group_rank)) +
                  ",\"median\":" + number(v.median) + ",\"slowdown\":" + number(v.slowdown) +
                  ",\"allreduce_seconds\":" + number(allreduce_seconds) + ",\"slow\":[";
  for (std::size_t i = 0; i < v.slow.size(); ++i) j += (i ? "," : "") + std::to_string(v.slow[i]);
  j += "],\"nodes\":[";
  for (std::size_t i = 0; i < v.nodes.size(); ++i) {
    j += std::string(i ? "," : "") + "[" + std::to_string(v.nodes[i].group_rank) + "," + number(v.nodes[i].seconds) + "]";
  }
  return j + "]}";
}

}  // namespace crun::precheck
