// HangWatch: which workers of a group have stopped heartbeating (base/heartbeat_file.h). No files,
// no clock of its own: the agent reads the heartbeat files at next_deadline() and passes in what
// they say with the time.
//
// Contract
//   - Limits: `initial` bounds the time from the group's start to a worker's first beat (start-up,
//     loading a checkpoint); `steady` bounds the silence after any beat. A zero limit is off.
//   - observe(local_rank, beat, now) folds in what the worker's file says and returns a Hang when
//     the worker is past its deadline: no first beat within `initial`, or no beat within `steady`
//     of the last one. A beat's time is taken as at most `now` (a worker cannot push its own
//     deadline into the future) and a beat older than the last one seen is ignored. A worker is
//     reported hung once; exited() stops watching it.
//   - observe_group(beats, now) observes every watched worker (beats[local_rank]; an exited one's
//     entry is ignored) and returns the hang to act on when any is past its deadline: the worker
//     that is furthest behind (no first beat, else the lowest last step), then the longest silent.
//     Its peers, blocked in a collective waiting for it, fall silent too but are a step ahead.
//   - next_deadline() is the earliest time a watched worker's file must be read: its deadline, or,
//     for a worker owing its first beat, the next look every `steady` when that comes first (so
//     that its first beat is learned at most `steady` late, and a worker that beats once and then
//     hangs is caught `steady` after that beat, not at the initial limit); nullopt: nothing to
//     watch.
//   - highest_step() is the highest step any worker of the group has beaten with.
//   - set_steady(limit) replaces the steady limit from now on (`--heartbeat-timeout auto`: the
//     agent/heartbeat_estimator.h value once it is known); deadlines follow at once.
//
// Threading
//   Not thread-safe; owned by the agent's event loop (or a test).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/heartbeat_file.h"

namespace crun {

struct HangLimits {
  std::chrono::milliseconds initial{0};
  std::chrono::milliseconds steady{0};
  bool enabled() const { return initial.count() > 0 || steady.count() > 0; }
};

struct Hang {
  int local_rank = 0;
  bool first_beat_missing = false;         // no beat at all within the initial limit
  std::int64_t last_step = 0;              // valid when !first_beat_missing
  std::chrono::milliseconds silent_for{0};  // since the last beat, or since the group started
};

class HangWatch {
 public:
  using Clock = std::chrono::steady_clock;

  HangWatch(HangLimits limits, int nproc, Clock::time_point started);

  std::optional<Hang> observe(int local_rank, const std::optional<Heartbeat>& beat, Clock::time_point now);
  std::optional<Hang> observe_group(const std::vector<std::optional<Heartbeat>>& beats, Clock::time_point now);
  void exited(int local_rank);
  std::optional<Clock::time_point> next_deadline() const;
  std::optional<std::int64_t> highest_step() const { return highest_step_; }
  void set_steady(std::chrono::milliseconds limit) { limits_.steady = limit; }
  const HangLimits& limits() const { return limits_; }

 private:
  struct Worker {
    bool watched = true;
    std::optional<Clock::time_point> last_beat;
    std::int64_t last_beat_ns = 0;
    std::int64_t last_step = 0;
    std::optional<Clock::time_point> next_look;  // no first beat and no initial limit: look again then
  };
  std::optional<Clock::time_point> deadline(const Worker& w) const;

  HangLimits limits_;
  Clock::time_point started_;
  std::vector<Worker> workers_;
  std::optional<std::int64_t> highest_step_;
};

}  // namespace crun
