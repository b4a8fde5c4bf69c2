// log_line_prefix: the prefix of a teed worker's console lines, torchrun's way.
//
// Contract
//   - With an empty `tmpl`: torch's default, "[<role><local_rank>]:" ("[default0]:").
//   - Otherwise `tmpl` (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) is read as Python's
//     string.Template.safe_substitute reads it, with torch's three names: ${role_name} / $role_name,
//     ${rank} (the global rank) and ${local_rank}; "$$" is "$"; any other "$..." (${pid},
//     ${bogus}, a lone "$") stays as written.
//   - rank_ranges(sorted ranks, offset): the ranks plus `offset`, runs written as "a-b", joined
//     by commas: {0,1,2,3,5} -> "0-3,5".
//   - log_line_prefix_for_ranks (--collapse-logs, agent/line_collapse.h): the same prefix for a
//     set of local ranks (sorted, not empty), ${local_rank} their rank_ranges and ${rank} those of
//     their global ranks (rank_offset + local rank): "[default0-7]:". For one rank it is
//     log_line_prefix's.
//
// Threading
//   Pure function.
#pragma once

#include <string>
#include <vector>

namespace crun {

std::string log_line_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank);
std::string rank_ranges(const std::vector<int>& sorted_ranks, int offset);
std::string log_line_prefix_for_ranks(const std::string& tmpl, const std::string& role, int rank_offset,
                                      const std::vector<int>& local_ranks);

}  // namespace crun
