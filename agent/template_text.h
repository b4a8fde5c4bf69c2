// safe_substitute: Python's string.Template(text).safe_substitute(names), as torch fills its
// templates: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (agent/log_line_prefix.h) and each worker's
// program arguments (torch's macros.substitute, with local_rank).
//
// Contract
//   - "$$" is "$"; "$name" and "${name}" are names' value where `names` has the name (a name is
//     Python's identifier [_A-Za-z][_A-Za-z0-9]*, the longest that follows "$"); anything else
//     with a "$" (an unknown name, an unclosed brace, a lone "$") stays as written.
//
// Threading
//   Pure function.
#pragma once

#include <map>
#include <string>

namespace crun {

std::string safe_substitute(const std::string& text, const std::map<std::string, std::string>& names);

}  // namespace crun
