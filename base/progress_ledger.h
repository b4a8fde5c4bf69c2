// ProgressLedger: whether the attempts of a job still make progress, judged by the highest
// heartbeat step each attempt reached (base/heartbeat_file.h). The one rule behind crun's
// no-progress stop, used by the single-node state machine and the multi-node coordinator.
//
// Contract
//   - end_attempt(highest_step) closes an attempt that failed and will be restarted (nullopt: it
//     sent no heartbeat). It made progress when its step beats every earlier attempt's; the first
//     attempt with a step always does. It returns true when the last `limit` attempts in a row made
//     none: the job should stop (with kExitNoProgress) instead of restarting. limit 0: never.
//   - best() is the highest step of all attempts so far; streak() the attempts in a row without
//     progress.
//
// Threading
//   Not thread-safe; a plain value owned by its decider.
#pragma once

#include <cstdint>
#include <optional>

namespace crun {

class ProgressLedger {
 public:
  explicit ProgressLedger(int limit = 0) : limit_(limit) {}
  // A ledger carried on from a record (a decider that does not live as long as the job).
  ProgressLedger(int limit, std::optional<std::int64_t> best, int streak) : limit_(limit), best_(best), streak_(streak) {}

  bool end_attempt(std::optional<std::int64_t> highest_step) {
    if (highest_step && (!best_ || *highest_step > *best_)) {
      best_ = highest_step;
      streak_ = 0;
    } else {
      ++streak_;
    }
    return limit_ > 0 && streak_ >= limit_;
  }
  std::optional<std::int64_t> best() const { return best_; }
  int streak() const { return streak_; }
  int limit() const { return limit_; }

 private:
  int limit_;
  std::optional<std::int64_t> best_;
  int streak_ = 0;
};

}  // namespace crun
