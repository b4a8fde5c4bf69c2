// Logging that an event loop can afford: a per-kind rate limit (write the admitted lines with
// base/fd_io.h's write_without_blocking).
//
// Contract
//   - LogThrottle::admit(kind, now): lets `burst` lines of one kind through at once and then one
//     per `interval` (a token bucket per kind). It returns nullopt for a line to suppress, else
//     how many lines of that kind were suppressed since the last admitted one, so the caller can
//     say "(N similar suppressed)". Kinds are a small fixed set chosen by the caller.
//
// Threading
//   One thread (the event loop that owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace crun {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogThrottle(int burst = 5, std::chrono::milliseconds interval = std::chrono::seconds(10))
      : burst_(burst), interval_(interval) {}

  std::optional<std::uint64_t> admit(std::string_view kind, Clock::time_point now);

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point refilled{};
    std::uint64_t suppressed = 0;
    bool started = false;
  };
  int burst_;
  std::chrono::milliseconds interval_;
  std::map<std::string, Bucket, std::less<>> buckets_;
};

}  // namespace crun
