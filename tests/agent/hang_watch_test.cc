// HangWatch with a fake clock: the initial and steady limits, clamped beat times, one report.
#include <catch2/catch.hpp>

#include "agent/hang_watch.h"

using namespace crun;
using namespace std::chrono_literals;
using Clock = HangWatch::Clock;

namespace {

const Clock::time_point t0 = Clock::time_point(100s);

Heartbeat beat(std::int64_t step, Clock::time_point at) {
  return Heartbeat{step, std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count()};
}

const std::optional<Heartbeat> none = Heartbeat{};  // the file as crun made it: no beat yet

}  // namespace

TEST_CASE("no first beat within the initial limit is a hang", "[hang_watch]") {
  HangWatch w(HangLimits{5s, 2s}, 2, t0);
  CHECK(w.next_deadline() == t0 + 2s);  // a look for a first beat, every steady limit
  CHECK_FALSE(w.observe(0, none, t0 + 2s));
  CHECK(w.next_deadline() == t0 + 2s);  // rank 1's look
  CHECK_FALSE(w.observe(0, none, t0 + 4999ms));
  auto h = w.observe(0, none, t0 + 5s);
  REQUIRE(h);
  CHECK(h->local_rank == 0);
  CHECK(h->first_beat_missing);
  CHECK(h->silent_for == 5s);
  CHECK_FALSE(w.observe(0, none, t0 + 6s));  // reported once
  CHECK(w.next_deadline() == t0 + 2s);       // rank 1 is still watched
}

TEST_CASE("a first beat is learned within the steady limit: a hang after it is not left to the initial limit",
          "[hang_watch]") {
  HangWatch w(HangLimits{60s, 2s}, 1, t0);
  CHECK(w.next_deadline() == t0 + 2s);
  CHECK_FALSE(w.observe(0, none, t0 + 2s));
  CHECK(w.next_deadline() == t0 + 4s);
  CHECK_FALSE(w.observe(0, beat(0, t0 + 3s), t0 + 4s));  // the first beat, then silence
  CHECK(w.next_deadline() == t0 + 5s);
  auto h = w.observe(0, beat(0, t0 + 3s), t0 + 5s);
  REQUIRE(h);
  CHECK_FALSE(h->first_beat_missing);
  CHECK(h->silent_for == 2s);
  HangWatch v(HangLimits{3s, 2s}, 1, t0);  // the look never runs past the initial limit
  CHECK_FALSE(v.observe(0, none, t0 + 2s));
  CHECK(v.next_deadline() == t0 + 3s);
  CHECK(v.observe(0, none, t0 + 3s));
}

TEST_CASE("after a beat, the steady limit runs from the beat's own time", "[hang_watch]") {
  HangWatch w(HangLimits{5s, 2s}, 1, t0);
  CHECK_FALSE(w.observe(0, beat(7, t0 + 1s), t0 + 1500ms));
  CHECK(w.next_deadline() == t0 + 3s);
  CHECK(w.highest_step() == 7);
  CHECK_FALSE(w.observe(0, beat(8, t0 + 2500ms), t0 + 3s));  // a newer beat moves the deadline
  CHECK(w.next_deadline() == t0 + 4500ms);
  CHECK_FALSE(w.observe(0, beat(8, t0 + 2500ms), t0 + 4s));  // the same beat again
  auto h = w.observe(0, beat(8, t0 + 2500ms), t0 + 4500ms);
  REQUIRE(h);
  CHECK_FALSE(h->first_beat_missing);
  CHECK(h->last_step == 8);
  CHECK(h->silent_for == 2s);
  CHECK_FALSE(w.next_deadline());
}

TEST_CASE("a beat stamped in the future counts as now, an older one is ignored", "[hang_watch]") {
  HangWatch w(HangLimits{0s, 2s}, 1, t0);
  // No initial limit: never a hang before the first beat, but a look every 2 s to learn of it.
  CHECK(w.next_deadline() == t0 + 2s);
  CHECK_FALSE(w.observe(0, none, t0 + 2s));
  CHECK(w.next_deadline() == t0 + 4s);
  CHECK_FALSE(w.observe(0, none, t0 + 10min));
  CHECK(w.next_deadline() == t0 + 10min + 2s);
  w = HangWatch(HangLimits{0s, 2s}, 1, t0);
  CHECK_FALSE(w.observe(0, beat(1, t0 + 1h), t0 + 1s));
  CHECK(w.next_deadline() == t0 + 3s);
  CHECK_FALSE(w.observe(0, beat(2, t0 + 500ms), t0 + 2s));  // older than the last: no effect
  CHECK(w.highest_step() == 1);
  CHECK(w.observe(0, none, t0 + 3s));
}

TEST_CASE("an unreadable file is no beat; an exited worker is not watched", "[hang_watch]") {
  HangWatch w(HangLimits{1s, 0s}, 2, t0);
  CHECK_FALSE(w.observe(0, beat(3, t0 + 200ms), t0 + 300ms));
  CHECK_FALSE(w.next_deadline() == t0 + 200ms);
  CHECK(w.next_deadline() == t0 + 1s);  // rank 1 still owes its first beat; rank 0 (no steady limit) is done
  w.exited(1);
  CHECK_FALSE(w.next_deadline());
  CHECK_FALSE(w.observe(1, std::nullopt, t0 + 10s));
  HangWatch v(HangLimits{1s, 0s}, 1, t0);
  CHECK(v.observe(0, std::nullopt, t0 + 1s));  // truncated by the worker: never a beat
}

TEST_CASE("highest_step is the group's maximum", "[hang_watch]") {
  HangWatch w(HangLimits{0s, 10s}, 3, t0);
  CHECK_FALSE(w.highest_step());
  w.observe(0, beat(4, t0 + 1s), t0 + 1s);
  w.observe(1, beat(9, t0 + 1s), t0 + 1s);
  w.observe(2, beat(6, t0 + 1s), t0 + 1s);
  CHECK(w.highest_step() == 9);
}

TEST_CASE("of a group gone silent, the worker furthest behind is the hang", "[hang_watch]") {
  // Rank 1 stopped after step 29; ranks 0 and 2 finished step 30 and then waited for it.
  HangWatch w(HangLimits{10s, 2s}, 3, t0);
  std::vector<std::optional<Heartbeat>> beats{beat(30, t0 + 1010ms), beat(29, t0 + 1000ms), beat(30, t0 + 1011ms)};
  CHECK_FALSE(w.observe_group(beats, t0 + 1500ms));
  auto h = w.observe_group(beats, t0 + 3100ms);  // all three are past their deadlines by now
  REQUIRE(h);
  CHECK(h->local_rank == 1);
  CHECK(h->last_step == 29);
  // Same step: the longest silent; no beat at all is furthest behind.
  HangWatch v(HangLimits{1s, 2s}, 3, t0);
  std::vector<std::optional<Heartbeat>> same{beat(5, t0 + 500ms), beat(5, t0 + 400ms), none};
  auto first = v.observe_group(same, t0 + 3s);
  REQUIRE(first);
  CHECK(first->local_rank == 2);
  CHECK(first->first_beat_missing);
  HangWatch u(HangLimits{1s, 2s}, 2, t0);
  auto older = u.observe_group({beat(5, t0 + 500ms), beat(5, t0 + 400ms)}, t0 + 3s);
  REQUIRE(older);
  CHECK(older->local_rank == 1);
}
