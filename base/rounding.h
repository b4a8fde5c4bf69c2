// Rounding to the nearest integer without libm: the crun binary links no libm, one shared library
// fewer for the loader to map and relocate at every agent start.
//
// Contract
//   - nearest_integer(x): the integer nearest to x, halves away from zero (as std::llround), for
//     finite x with |x| < 2^62; NaN and larger values are the caller's to keep out.
//   - round_to_millis(seconds): seconds rounded to the nearest millisecond, as a double.
//
// Threading
//   Pure functions: any thread.
#pragma once

namespace crun {

constexpr long long nearest_integer(double x) {
  return x < 0 ? -static_cast<long long>(-x + 0.5) : static_cast<long long>(x + 0.5);
}

constexpr double round_to_millis(double seconds) {
  return static_cast<double>(nearest_integer(seconds * 1000)) / 1000;
}

}  // namespace crun
