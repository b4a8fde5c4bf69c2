// Rounding without libm: nearest_integer as std::llround, round_to_millis for JSON seconds.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "base/rounding.h"

using crun::nearest_integer;
using crun::round_to_millis;

TEST_CASE("nearest_integer rounds as llround, halves away from zero", "[rounding]") {
  // 0.49999999999999994 + 0.5 rounds up to 1.0 in double arithmetic: adding a half is wrong there.
  for (double x : {0.0, 0.49, 0.5, 0.51, 1.5, 2.5, -0.49, -0.5, -0.51, -1.5, -2.5, 1e12 + 0.5, -1e12 - 0.5, 123456.789,
                   0.49999999999999994, -0.49999999999999994, 4503599627370497.0, -4503599627370497.0, 1e18}) {
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

TEST_CASE("round_to_millis takes any double a peer's record may carry", "[rounding]") {
  // Found by tests/fuzz/node_status: 7.57e55 s was converted to long long (undefined behaviour).
  CHECK(round_to_millis(7.57132e55) == 7.57132e55);
  CHECK(round_to_millis(-1e300) == -1e300);
  CHECK(round_to_millis(1e13) == 1e13);
  CHECK(std::isinf(round_to_millis(std::numeric_limits<double>::infinity())));
  CHECK(std::isnan(round_to_millis(std::numeric_limits<double>::quiet_NaN())));
}
