#include "agent/heartbeat_estimator.h"

#include <algorithm>

namespace crun {

using std::chrono::milliseconds;

HeartbeatEstimator::HeartbeatEstimator(AutoTimeoutRule rule, int nproc)
    : rule_(rule), last_beat_ns_(static_cast<std::size_t>(nproc), 0) {}

void HeartbeatEstimator::observe(int local_rank, const std::optional<Heartbeat>& beat) {
  if (!beat || beat->monotonic_ns == 0) return;
  std::int64_t& last = last_beat_ns_.at(static_cast<std::size_t>(local_rank));
  if (beat->monotonic_ns <= last) return;
  if (last != 0) {
    recent_ns_.push_back(beat->monotonic_ns - last);
    if (static_cast<int>(recent_ns_.size()) > rule_.window) recent_ns_.pop_front();
    ++seen_;
  }
  last = beat->monotonic_ns;
}

milliseconds HeartbeatEstimator::longest_recent() const {
  const std::int64_t ns = recent_ns_.empty() ? 0 : *std::max_element(recent_ns_.begin(), recent_ns_.end());
  return milliseconds((ns + 999'999) / 1'000'000);
}

std::optional<milliseconds> HeartbeatEstimator::timeout() const {
  if (seen_ < rule_.min_intervals || recent_ns_.empty()) return std::nullopt;
  const std::int64_t longest = *std::max_element(recent_ns_.begin(), recent_ns_.end());
  const double ns = static_cast<double>(longest) * rule_.factor;
  milliseconds t(static_cast<std::int64_t>((ns + 999'999.0) / 1'000'000.0));
  t = std::max(t, rule_.floor);
  if (rule_.ceiling.count() > 0) t = std::min(t, rule_.ceiling);
  return t;
}

bool HeartbeatEstimator::take_change() {
  const auto now = timeout();
  if (!now) return false;
  if (taken_) {
    const double before = static_cast<double>(taken_->count());
    if (static_cast<double>(now->count()) < before * 1.25 && static_cast<double>(now->count()) > before * 0.75) return false;
  }
  taken_ = now;
  return true;
}

milliseconds HeartbeatEstimator::sample_period() const {
  if (!timeout()) return milliseconds(50);
  return std::clamp(longest_recent() / 2, milliseconds(50), milliseconds(1000));
}

}  // namespace crun
