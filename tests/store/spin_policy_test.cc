// SpinPolicy: the event loop spins only while the machine's runnable tasks fit its CPUs, and
// reads that count at most once per kRecheck.
#include "store/spin_policy.h"

#include <catch2/catch.hpp>

using crun::SpinPolicy;
using namespace std::chrono_literals;

TEST_CASE("the loop spins only while the runnable tasks fit the CPUs", "[spin_policy]") {
  const auto t0 = SpinPolicy::Clock::time_point{} + 1h;
  SECTION("idle machine: spin; oversubscribed: do not") {
    SpinPolicy idle(2);
    CHECK(idle.may_spin(t0, [] { return 1; }));
    SpinPolicy full(2);
    CHECK(full.may_spin(t0, [] { return 2; }));
    SpinPolicy over(2);
    CHECK_FALSE(over.may_spin(t0, [] { return 3; }));
  }
  SECTION("the count is read once per kRecheck, and the answer kept in between") {
    SpinPolicy p(2);
    int reads = 0;
    int runnable = 1000;
    auto count = [&] {
      ++reads;
      return runnable;
    };
    CHECK_FALSE(p.may_spin(t0, count));
    runnable = 1;  // the load went, but not yet looked at again
    CHECK_FALSE(p.may_spin(t0 + SpinPolicy::kRecheck - 1us, count));
    CHECK(reads == 1);
    CHECK(p.may_spin(t0 + SpinPolicy::kRecheck, count));
    CHECK(reads == 2);
    runnable = 3;
    CHECK(p.may_spin(t0 + SpinPolicy::kRecheck + 5ms, count));
    CHECK_FALSE(p.may_spin(t0 + 2 * SpinPolicy::kRecheck, count));
    CHECK(reads == 3);
  }
}
