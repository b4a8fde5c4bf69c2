// log_line_prefix: the prefix of a teed worker's console lines, torchrun's way.
//
// Contract
//   - With an empty `tmpl`: torch's default, "[<role><local_rank>]:" ("[default0]:").
//   - Otherwise `tmpl` (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) is read as Python's
//     string.Template.safe_substitute reads it, with torch's three names: ${role_name} / $role_name,
//     ${rank} (the global rank) and ${local_rank}; "$$" is "$"; any other "$..." (${pid},
//     ${bogus}, a lone "$") stays as written.
//
// Threading
//   Pure function.
#pragma once

#include <string>

namespace crun {

std::string log_line_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank);

}  // namespace crun
