// Rounding without libm: nearest_integer as std::llround, round_to_millis for JSON seconds.
#include <catch2/catch.hpp>

#include <cmath>

#include "base/rounding.h"

using crun::nearest_integer;
using crun::round_to_millis;

TEST_CASE("nearest_integer rounds as llround, halves away from zero", "[rounding]") {
  for (double x : {0.0, 0.49, 0.5, 0.51, 1.5, 2.5, -0.49, -0.5, -0.51, -1.5, -2.5, 1e12 + 0.5, -1e12 - 0.5, 123456.789}) {
    INFO(x);
    CHECK(nearest_integer(x) == std::llround(x));
  }
}

TEST_CASE("round_to_millis keeps three decimals", "[rounding]") {
  CHECK(round_to_millis(1.23449) == 1.234);
  CHECK(round_to_millis(1.2345) == 1.235);
  CHECK(round_to_millis(-0.0004) == 0.0);
  CHECK(round_to_millis(1795690000.1236) == 1795690000.124);
}
