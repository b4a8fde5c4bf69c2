#include "agent/log_line_prefix.h"

#include "agent/template_text.h"

namespace crun {

std::string log_line_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank) {
  if (tmpl.empty()) return "[" + role + std::to_string(local_rank) + "]:";
  return safe_substitute(tmpl, {{"role_name", role}, {"rank", std::to_string(rank)}, {"local_rank", std::to_string(local_rank)}});
}

std::string rank_ranges(const std::vector<int>& sorted_ranks, int offset) {
  std::string text;
  for (std::size_t i = 0; i < sorted_ranks.size();) {
    std::size_t j = i;
    while (j + 1 < sorted_ranks.size() && sorted_ranks[j + 1] == sorted_ranks[j] + 1) ++j;
    if (!text.empty()) text.push_back(',');
    text += std::to_string(sorted_ranks[i] + offset);
    if (j > i) text += "-" + std::to_string(sorted_ranks[j] + offset);
    i = j + 1;
  }
  return text;
}

std::string log_line_prefix_for_ranks(const std::string& tmpl, const std::string& role, int rank_offset,
                                      const std::vector<int>& local_ranks) {
  const std::string local = rank_ranges(local_ranks, 0);
  if (tmpl.empty()) return "[" + role + local + "]:";
  return safe_substitute(tmpl, {{"role_name", role}, {"rank", rank_ranges(local_ranks, rank_offset)}, {"local_rank", local}});
}

}  // namespace crun
