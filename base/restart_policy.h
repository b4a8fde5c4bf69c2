// The restart policy: what a worker failure leads to, restart or the end of the job. The one
// rule behind it, applied by the single-node state machine (agent/agent_state_machine.cc), c10d's
// coordinator (rendezvous/coordinator_core.cc) and each etcd-v3 agent (rendezvous/etcd_round_core.cc).
//
// Contract
//   - ProgressLedger: whether the attempts of a job still make progress, judged by the highest
//     heartbeat step each attempt reached (base/heartbeat_file.h). end_attempt(highest_step)
//     closes an attempt that failed and will be restarted (nullopt: it sent no heartbeat). It made
//     progress when its step beats every earlier attempt's; the first attempt with a step always
//     does. It returns true when the last `limit` attempts in a row made none. limit 0: never.
//     best() is the highest step of all attempts so far; streak() the attempts in a row without
//     progress.
//   - decide_after_failure(restart_count, max_restarts, failure_code, highest_step, ledger), for
//     the failure that ended the attempt with that restart count:
//       · no restarts left (restart_count >= max_restarts): the job ends with the failure's code;
//         the ledger is not touched;
//       · else the attempt goes into the ledger; when it says no progress, the job ends with
//         kExitNoProgress (8: "do not requeue");
//       · else restart, with restart count restart_count + 1.
//     The decision carries a reason for the logs ("restart 2 of 3", "no restarts left (max 3)",
//     "3 restarts in a row made no progress (highest step 120)").
//   - restarts_remain(restart_count, max_restarts): whether a failure now would still restart,
//     the ledger aside.
//
// Threading
//   Pure: no state but the ledger the caller owns and passes in; not thread-safe, a plain value
//   owned by its decider.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/exit_codes.h"

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

struct RestartDecision {
  enum class Kind { kRestart, kNoRestartsLeft, kNoProgress };
  Kind kind = Kind::kRestart;
  int exit_code = kExitSuccess;  // the job's exit code when it ends (unused for kRestart)
  std::string reason;

  bool restart() const { return kind == Kind::kRestart; }
  bool no_progress() const { return kind == Kind::kNoProgress; }
};

inline bool restarts_remain(int restart_count, int max_restarts) { return restart_count < max_restarts; }

inline RestartDecision decide_after_failure(int restart_count, int max_restarts, int failure_code,
                                            std::optional<std::int64_t> highest_step, ProgressLedger& ledger) {
  if (!restarts_remain(restart_count, max_restarts)) {
    return {RestartDecision::Kind::kNoRestartsLeft, failure_code,
            "no restarts left (max " + std::to_string(max_restarts) + ")"};
  }
  if (ledger.end_attempt(highest_step)) {
    return {RestartDecision::Kind::kNoProgress, kExitNoProgress,
            std::to_string(ledger.streak()) + (ledger.streak() == 1 ? " restart" : " restarts") +
                " in a row made no progress (highest step " +
                (ledger.best() ? std::to_string(*ledger.best()) : std::string("none")) + ")"};
  }
  return {RestartDecision::Kind::kRestart, kExitSuccess,
          "restart " + std::to_string(restart_count + 1) + " of " + std::to_string(max_restarts)};
}

}  // namespace crun
