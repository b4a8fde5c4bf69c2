#include "base/random_bits.h"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

namespace crun {

std::uint64_t random_bits() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof r)) return r;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  r = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
  return (r * 0x9e3779b97f4a7c15u) ^ (static_cast<std::uint64_t>(::getpid()) << 32);
}

}  // namespace crun
