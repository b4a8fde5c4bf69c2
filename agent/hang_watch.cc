#include "agent/hang_watch.h"

#include <algorithm>

namespace crun {

HangWatch::HangWatch(HangLimits limits, int nproc, Clock::time_point started)
    : limits_(limits), started_(started), workers_(static_cast<std::size_t>(nproc)) {}

std::optional<HangWatch::Clock::time_point> HangWatch::deadline(const Worker& w) const {
  if (!w.watched) return std::nullopt;
  if (!w.last_beat) {
    // Owing its first beat: hung at the initial limit; until then a look every `steady`, so that
    // a first beat is learned at most `steady` late and the steady limit runs from it.
    std::optional<Clock::time_point> due;
    if (limits_.initial.count() > 0) due = started_ + limits_.initial;
    if (limits_.steady.count() > 0) {
      const auto look = w.next_look.value_or(started_ + limits_.steady);
      if (!due || look < *due) due = look;
    }
    return due;
  }
  if (limits_.steady.count() == 0) return std::nullopt;
  return *w.last_beat + limits_.steady;
}

std::optional<Hang> HangWatch::observe(int local_rank, const std::optional<Heartbeat>& beat, Clock::time_point now) {
  Worker& w = workers_.at(static_cast<std::size_t>(local_rank));
  if (!w.watched) return std::nullopt;
  if (beat && beat->monotonic_ns != 0 && beat->monotonic_ns > w.last_beat_ns) {
    w.last_beat_ns = beat->monotonic_ns;
    w.last_beat = std::min(now, Clock::time_point(std::chrono::nanoseconds(beat->monotonic_ns)));
    w.last_step = beat->step;
    highest_step_ = std::max(highest_step_.value_or(beat->step), beat->step);
  }
  const auto due = deadline(w);
  if (!due || now < *due) return std::nullopt;
  if (!w.last_beat && !(limits_.initial.count() > 0 && now >= started_ + limits_.initial)) {  // only a look
    w.next_look = now + limits_.steady;
    return std::nullopt;
  }
  w.watched = false;
  Hang h;
  h.local_rank = local_rank;
  h.first_beat_missing = !w.last_beat;
  h.last_step = w.last_step;
  h.silent_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_beat.value_or(started_));
  return h;
}

std::optional<Hang> HangWatch::observe_group(const std::vector<std::optional<Heartbeat>>& beats, Clock::time_point now) {
  std::optional<Hang> worst;
  const auto behind = [](const Hang& a, const Hang& b) {  // is a further behind than b?
    if (a.first_beat_missing != b.first_beat_missing) return a.first_beat_missing;
    if (!a.first_beat_missing && a.last_step != b.last_step) return a.last_step < b.last_step;
    return a.silent_for > b.silent_for;
  };
  for (std::size_t lr = 0; lr < beats.size() && lr < workers_.size(); ++lr) {
    auto h = observe(static_cast<int>(lr), beats[lr], now);
    if (h && (!worst || behind(*h, *worst))) worst = h;
  }
  return worst;
}

void HangWatch::exited(int local_rank) { workers_.at(static_cast<std::size_t>(local_rank)).watched = false; }

std::optional<HangWatch::Clock::time_point> HangWatch::next_deadline() const {
  std::optional<Clock::time_point> first;
  for (const auto& w : workers_) {
    if (auto d = deadline(w); d && (!first || *d < *first)) first = d;
  }
  return first;
}

}  // namespace crun
