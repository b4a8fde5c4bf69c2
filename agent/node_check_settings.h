// NodeCheckSettings: what the launcher decided about node checks (--node-check and friends,
// docs/operations.md "Node checks"), handed to the agent in its AgentConfig.
//
// Contract
//   Plain values, already validated by the launcher: commands are non-empty texts, `disabled`
//   holds only built-in names ("disk", "net", "gpu"), timeout and interval > 0.
//
// Threading
//   Value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace crun {

struct NodeCheckSettings {
  std::vector<std::string> commands;          // --node-check CMD, each a command line as given
  std::set<std::string> disabled;             // --no-node-check NAME
  std::chrono::milliseconds timeout{30000};   // --node-check-timeout: one check's bound (and the gpu wait's)
  std::chrono::milliseconds interval{10000};  // --node-check-interval: between an unhealthy verdict and the next try
  std::vector<std::string> paths;             // --node-check-path: more directories for `disk`
  std::string search_path = "/usr/local/bin:/usr/bin:/bin";  // crun's PATH: where a command's program is found
  std::uint64_t min_free = std::uint64_t{16} << 20;  // --node-check-min-free, bytes (decisions.md)
};

// The built-in checks' names, in the order they run.
inline const std::vector<std::string>& builtin_node_checks() {
  static const std::vector<std::string> names{"disk", "net", "gpu"};
  return names;
}

}  // namespace crun
