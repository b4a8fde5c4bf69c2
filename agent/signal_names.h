// Signal names: "SIGTERM" <-> 15, as used by --signals-to-handle and the failure report.
//
// Contract
//   signal_number() accepts "SIGTERM", "TERM" or "15" (case-insensitive for names) and returns
//   nullopt for anything else. signal_name() returns "SIGTERM" for 15, or "SIG<n>" when unknown.
//
// Threading
//   Pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace crun {

std::optional<int> signal_number(std::string_view text);
std::string signal_name(int signo);

}  // namespace crun
