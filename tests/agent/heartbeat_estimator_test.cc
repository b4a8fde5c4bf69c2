// HeartbeatEstimator (--heartbeat-timeout auto): the intervals it sees, when its value is known,
// the floor and ceiling, what counts as a change, how often it asks to be fed.
#include <catch2/catch.hpp>

#include "agent/hang_watch.h"
#include "agent/heartbeat_estimator.h"

using namespace crun;
using namespace std::chrono_literals;

namespace {

Heartbeat at_ms(std::int64_t step, std::int64_t ms) { return Heartbeat{step, ms * 1'000'000 + 5}; }

// One worker beating every `every` ms from 1 s on, `beats` times, each beat seen once.
HeartbeatEstimator fed(int beats, std::int64_t every, AutoTimeoutRule rule = {}) {
  HeartbeatEstimator e(rule, 1);
  for (int i = 0; i < beats; ++i) e.observe(0, at_ms(i, 1000 + i * every));
  return e;
}

}  // namespace

TEST_CASE("nothing is known until three intervals are seen; then 2.5 x the longest", "[heartbeat_estimator]") {
  HeartbeatEstimator e(AutoTimeoutRule{}, 1);
  e.observe(0, Heartbeat{});  // the file as crun made it: no beat
  CHECK_FALSE(e.timeout());
  CHECK(e.sample_period() == 50ms);
  for (int i = 0; i < 3; ++i) e.observe(0, at_ms(i, 1000 + i * 200));
  CHECK(e.intervals_seen() == 2);
  CHECK_FALSE(e.timeout());
  CHECK_FALSE(e.take_change());
  e.observe(0, at_ms(3, 1600));
  REQUIRE(e.timeout());
  CHECK(*e.timeout() == 500ms);  // 2.5 x 200 ms, at the floor
  CHECK(e.sample_period() == 100ms);
  CHECK(e.take_change());
  CHECK_FALSE(e.take_change());
}

TEST_CASE("the same beat read twice, or an older one, is no interval", "[heartbeat_estimator]") {
  HeartbeatEstimator e(AutoTimeoutRule{}, 1);
  e.observe(0, at_ms(0, 1000));
  e.observe(0, at_ms(0, 1000));
  e.observe(0, at_ms(1, 900));
  e.observe(0, std::nullopt);  // a file that cannot be read whole
  CHECK(e.intervals_seen() == 0);
}

TEST_CASE("a beat the agent missed lengthens the interval; the step is not a count of beats", "[heartbeat_estimator]") {
  HeartbeatEstimator e(AutoTimeoutRule{}, 1);
  e.observe(0, at_ms(0, 1000));
  e.observe(0, at_ms(64, 1400));   // two beats of 200 ms seen as one interval; steps of 64 samples
  e.observe(0, at_ms(128, 1600));
  e.observe(0, at_ms(192, 1800));
  CHECK(*e.timeout() == 1000ms);   // 2.5 x 400 ms: longer, never shorter
}

TEST_CASE("intervals from every worker count; each worker's are its own", "[heartbeat_estimator]") {
  HeartbeatEstimator e(AutoTimeoutRule{}, 2);
  e.observe(0, at_ms(0, 1000));
  e.observe(1, at_ms(0, 1050));
  e.observe(0, at_ms(1, 1300));  // 300 ms
  e.observe(1, at_ms(1, 1450));  // 400 ms (not 150 ms from rank 0's beat)
  CHECK_FALSE(e.timeout());
  e.observe(0, at_ms(2, 1600));  // 300 ms
  CHECK(*e.timeout() == 1000ms);
}

TEST_CASE("the floor and the ceiling bound it", "[heartbeat_estimator]") {
  CHECK(*fed(5, 10).timeout() == 500ms);                    // 25 ms is below the floor
  AutoTimeoutRule capped;
  capped.ceiling = 3s;
  CHECK(*fed(5, 2000, capped).timeout() == 3s);            // 5 s is above the ceiling
  CHECK(*fed(5, 2000).timeout() == 5s);
}

TEST_CASE("only the last `window` intervals count; a move of a quarter is a change", "[heartbeat_estimator]") {
  AutoTimeoutRule rule;
  rule.window = 4;
  HeartbeatEstimator e(rule, 1);
  std::int64_t t = 1000;
  e.observe(0, at_ms(0, t));
  e.observe(0, at_ms(1, t += 2000));  // a slow first step (warm-up)
  for (int i = 2; i < 5; ++i) e.observe(0, at_ms(i, t += 400));
  CHECK(*e.timeout() == 5000ms);
  CHECK(e.take_change());
  e.observe(0, at_ms(5, t += 400));   // the warm-up leaves the window
  CHECK(*e.timeout() == 1000ms);
  CHECK(e.sample_period() == 200ms);
  CHECK(e.take_change());
  e.observe(0, at_ms(6, t += 450));   // 1125 ms: less than a quarter more
  CHECK(*e.timeout() == 1125ms);
  CHECK_FALSE(e.take_change());
  e.observe(0, at_ms(7, t += 520));   // 1300 ms: a quarter more than 1000 ms
  CHECK(e.take_change());
}

TEST_CASE("its value drives HangWatch's steady limit", "[heartbeat_estimator]") {
  using Clock = HangWatch::Clock;
  const Clock::time_point t0(100s);
  HangWatch w(HangLimits{10s, 10s}, 1, t0);  // auto: the initial limit until the value is known
  HeartbeatEstimator e(AutoTimeoutRule{}, 1);
  const auto beat = [&](std::int64_t step, std::chrono::milliseconds after) {
    return Heartbeat{step, std::chrono::duration_cast<std::chrono::nanoseconds>((t0 + after).time_since_epoch()).count()};
  };
  for (int i = 0; i < 4; ++i) {
    const auto b = beat(i, std::chrono::milliseconds(200 * i));
    e.observe(0, b);
    CHECK_FALSE(w.observe(0, b, t0 + std::chrono::milliseconds(200 * i)));
  }
  w.set_steady(*e.timeout());
  CHECK(w.next_deadline() == t0 + 600ms + 500ms);
  const auto hang = w.observe(0, beat(3, 600ms), t0 + 1100ms);
  REQUIRE(hang);
  CHECK(hang->last_step == 3);
  CHECK(hang->silent_for == 500ms);
}
