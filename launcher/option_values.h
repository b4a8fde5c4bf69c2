// Values of launch settings as text: the one boolean reader for flags' PET_* variables and
// --rdzv-conf keys.
//
// Contract
//   parse_bool(text) accepts what torch's rendezvous parameters accept, in any case: 1 true t yes y
//   on, and 0 false f no n off (surrounding blanks ignored); nullopt for anything else, "" too
//   (callers decide what an empty value means and name the setting in their error).
//
// Threading
//   Pure function.
#pragma once

#include <optional>
#include <string_view>

namespace crun {

std::optional<bool> parse_bool(std::string_view text);

}  // namespace crun
