// HeartbeatEstimator: `--heartbeat-timeout auto`, the heartbeat timeout derived from the intervals
// the workers actually beat at. No files, no clock: the agent passes in what each worker's
// heartbeat file says (base/heartbeat_file.h) whenever it reads them.
//
// Contract
//   - observe(local_rank, beat) folds in a worker's file. An interval is the time between two
//     consecutive beats of one worker as the agent saw them (the beats' own monotonic times, so
//     when the agent reads late the interval is still the worker's); a beat no newer than the
//     last one seen is ignored. A beat the agent missed (two beats between two reads) makes the
//     interval longer, never shorter: missing beats only raises the timeout. The step is not
//     used (it is "any number that grows with progress", not a count of beats).
//   - timeout(): nullopt until `min_intervals` intervals (all workers together) are seen; then
//     factor x the longest of the last `window` intervals, never below `floor`, never above
//     `ceiling` (0: none), rounded up to the millisecond. Until then the caller applies its
//     initial limit.
//   - take_change(): true once when timeout() is first known, and again each time it has moved by
//     a quarter or more from the value last taken (what the agent logs and shows in /status).
//   - sample_period(): how often the caller should read the files to see each beat: 50 ms until
//     the timeout is known, then half the longest recent interval, within [50 ms, 1 s].
//   - intervals_seen(), longest_recent(): what the value was derived from (for the log line).
//
// Threading
//   Not thread-safe; owned by the agent's event loop (or a test).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "base/heartbeat_file.h"

namespace crun {

struct AutoTimeoutRule {
  double factor = 2.5;
  std::chrono::milliseconds floor{500};
  std::chrono::milliseconds ceiling{0};  // 0: none
  int min_intervals = 3;
  int window = 32;
};

class HeartbeatEstimator {
 public:
  HeartbeatEstimator(AutoTimeoutRule rule, int nproc);

  void observe(int local_rank, const std::optional<Heartbeat>& beat);
  std::optional<std::chrono::milliseconds> timeout() const;
  bool take_change();
  std::chrono::milliseconds sample_period() const;
  int intervals_seen() const { return seen_; }
  std::chrono::milliseconds longest_recent() const;
  const AutoTimeoutRule& rule() const { return rule_; }

 private:
  AutoTimeoutRule rule_;
  std::vector<std::int64_t> last_beat_ns_;  // per local rank; 0: none seen
  std::deque<std::int64_t> recent_ns_;      // the last `window` intervals, all workers
  int seen_ = 0;
  std::optional<std::chrono::milliseconds> taken_;
};

}  // namespace crun
