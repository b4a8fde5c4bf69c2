// Fuzzes Slurm hostlist expressions (SLURM_*NODELIST) and SLURM_TASKS_PER_NODE lists.
// Bad input may only end in std::invalid_argument, and hostlist_size (the count taken before
// anything is expanded) must agree with expand_hostlist: same verdict, the same number of hosts,
// no more bytes than it said, all within the limits of launcher/hostlist.h. Lists above
// kExpandAtMost hosts are only counted: expanding them is linear work the limits already bound,
// and it would slow the fuzzer down a thousandfold.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "launcher/hostlist.h"

namespace {
constexpr std::size_t kExpandAtMost = 4096;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  crun::HostlistSize counted;
  bool valid = true;
  try {
    counted = crun::hostlist_size(text);
  } catch (const std::invalid_argument&) {
    valid = false;
  }
  if (valid && (counted.hosts > crun::kMaxHosts || counted.bytes > crun::kMaxHostlistBytes)) std::abort();
  if (!valid || counted.hosts <= kExpandAtMost) {
    try {
      const auto hosts = crun::expand_hostlist(text);
      if (!valid || hosts.size() != counted.hosts) std::abort();
      std::size_t bytes = 0;
      for (const auto& h : hosts) {
        if (h.empty() || h.size() > crun::kMaxHostNameLength) std::abort();
        bytes += h.size() + 1;
      }
      if (bytes > counted.bytes) std::abort();
    } catch (const std::invalid_argument&) {
      if (valid) std::abort();
    }
  }
  try {
    if (crun::expand_tasks_per_node(text).size() > crun::kMaxHosts) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
