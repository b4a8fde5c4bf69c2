#include "store/log_throttle.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace crun {

std::optional<std::uint64_t> LogThrottle::admit(std::string_view kind, Clock::time_point now) {
  auto it = buckets_.find(kind);
  if (it == buckets_.end()) it = buckets_.emplace(std::string(kind), Bucket{}).first;
  Bucket& b = it->second;
  if (!b.started) {
    b.started = true;
    b.tokens = burst_;
    b.refilled = now;
  } else if (now > b.refilled) {
    const double earned = std::chrono::duration<double>(now - b.refilled) / std::chrono::duration<double>(interval_);
    b.tokens = std::min<double>(burst_, b.tokens + earned);
    b.refilled = now;
  }
  if (b.tokens < 1) {
    ++b.suppressed;
    return std::nullopt;
  }
  b.tokens -= 1;
  const std::uint64_t suppressed = b.suppressed;
  b.suppressed = 0;
  return suppressed;
}

}  // namespace crun
