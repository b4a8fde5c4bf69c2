// Slurm hostlist expressions, expanded without scontrol.
//
// Contract
//   expand_hostlist("gpu[01-04,07],cpu3") -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu3, in the order
//   `scontrol show hostnames` prints them:
//     - hosts are separated by commas or whitespace outside brackets; empty items are skipped;
//     - a bracket holds comma-separated numbers and LO-HI ranges; a range keeps the width of
//       LO ("x[009-011]" -> x009 x010 x011, "p[8-11]" -> p8 ... p11);
//     - several brackets in one host form a product, the leftmost varying slowest
//       ("a[0-1].b[2-3]" -> a0.b2 a0.b3 a1.b2 a1.b3); text after the last bracket is a suffix;
//     - duplicates are kept.
//   A malformed expression (unbalanced or empty bracket, a non-number, HI < LO) throws
//   std::invalid_argument whose message names the offending part; so does one that is too big.
//   The size is counted from the parsed expression before anything is expanded, so memory stays
//   bounded whatever the input: at most kMaxHosts hosts, no name longer than kMaxHostNameLength
//   (zero padding included), at most kMaxHostlistBytes of names in all.
//
//   hostlist_size(expression) parses and counts without expanding: the number of hosts
//   expand_hostlist returns, and an upper bound of their bytes (each name's length + 1). It throws
//   exactly when expand_hostlist does.
//
//   expand_tasks_per_node("2(x3),1") -> 2 2 2 1 (SLURM_TASKS_PER_NODE's format).
//
// Threading
//   Pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace crun {

inline constexpr std::size_t kMaxHosts = 1u << 20;
inline constexpr std::size_t kMaxHostNameLength = 255;  // DNS's limit for a whole name
inline constexpr std::size_t kMaxHostlistBytes = 64u << 20;  // names plus one separator each

struct HostlistSize {
  std::size_t hosts = 0;
  std::size_t bytes = 0;  // an upper bound of the names' lengths + 1 each
};

std::vector<std::string> expand_hostlist(const std::string& expression);
HostlistSize hostlist_size(const std::string& expression);
std::vector<int> expand_tasks_per_node(const std::string& expression);

}  // namespace crun
