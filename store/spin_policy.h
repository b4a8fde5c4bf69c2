// SpinPolicy: whether an event loop may poll without blocking (spin) after its handlers ran.
//
// Contract
//   - Spinning catches a request/reply client's next request without a sleep and a wake-up (one
//     blocking client: ~2.5x the round trips per second here), but a spinning thread takes its
//     CPU from the other runnable tasks: with more of them than CPUs (1,024 agents on 2 cores)
//     it only burns time they need. So the loop spins only while the machine's runnable tasks
//     (itself included) are no more than its CPUs.
//   - may_spin(now, runnable) says whether to spin now. It asks `runnable()` for the count of
//     runnable tasks at most once per kRecheck and keeps the answer in between.
//   - Pure: the caller reads the clock and the count (/proc/loadavg).
//
// Threading
//   One event loop's thread.
#pragma once

#include <chrono>

namespace crun {

class SpinPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kRecheck{10};

  explicit SpinPolicy(int cpus) : cpus_(cpus) {}

  template <typename Runnable>
  bool may_spin(Clock::time_point now, Runnable&& runnable) {
    if (!ever_checked_ || now - checked_ >= kRecheck) {
      ever_checked_ = true;
      checked_ = now;
      allowed_ = runnable() <= cpus_;
    }
    return allowed_;
  }

 private:
  int cpus_;
  bool ever_checked_ = false;
  Clock::time_point checked_{};
  bool allowed_ = false;
};

}  // namespace crun
