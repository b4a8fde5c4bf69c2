// store/log_throttle: a token bucket per kind of log line, counting what it suppresses.
#include <catch2/catch.hpp>
#include <chrono>

#include "store/log_throttle.h"

using namespace crun;
using namespace std::chrono_literals;

TEST_CASE("the log throttle lets a burst through, then counts what it suppresses", "[log_throttle]") {
  LogThrottle throttle(3, 10s);
  const auto t0 = LogThrottle::Clock::now();
  int admitted = 0;
  for (int i = 0; i < 200; ++i) admitted += throttle.admit("dropped", t0).has_value();
  CHECK(admitted == 3);
  CHECK(throttle.admit("refused", t0) == 0u);  // kinds are counted apart
  CHECK_FALSE(throttle.admit("dropped", t0 + 9s).has_value());
  CHECK(throttle.admit("dropped", t0 + 11s) == 198u);
}
