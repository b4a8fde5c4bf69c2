#include "base/open_files.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>

namespace crun {

namespace {
std::atomic<std::uint64_t> g_inherited_soft{0};  // 0: not raised
}

OpenFilesLimit raise_open_files_limit(std::uint64_t wanted) {
  OpenFilesLimit out;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return out;
  out.before = out.now = lim.rlim_cur;
  out.hard = lim.rlim_max;
  const std::uint64_t target = std::min<std::uint64_t>(wanted, lim.rlim_max);
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= target) return out;
  const rlim_t original = lim.rlim_cur;
  lim.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return out;
  std::uint64_t none = 0;
  g_inherited_soft.compare_exchange_strong(none, original);
  out.now = target;
  return out;
}

std::uint64_t inherited_open_files_soft_limit() { return g_inherited_soft.load(); }

void restore_open_files_soft_limit() {
  const std::uint64_t soft = g_inherited_soft.load(std::memory_order_relaxed);
  if (soft == 0) return;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  lim.rlim_cur = soft;
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace crun
