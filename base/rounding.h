// Rounding to the nearest integer, defined for every input that reaches it: round_to_millis takes
// any double a peer may send (std::llround of one beyond long long's range is unspecified).
//
// Contract
//   - nearest_integer(x): the integer nearest to x, halves away from zero (as std::llround), for
//     finite x with |x| < 2^62; NaN and larger values are the caller's to keep out.
//   - round_to_millis(seconds): seconds rounded to the nearest millisecond, for any double (a
//     peer's record may carry any): values too large to have a fraction, NaN and infinities come
//     back as they are.
//
// Threading
//   Pure functions: any thread.
#pragma once

namespace crun {

constexpr long long nearest_integer(double x) {
  long long whole = static_cast<long long>(x);  // toward zero
  const double fraction = x - static_cast<double>(whole);  // exact below 2^52; 0 above
  if (fraction >= 0.5) ++whole;
  if (fraction <= -0.5) --whole;
  return whole;
}

constexpr double round_to_millis(double seconds) {
  const double millis = seconds * 1000;
  constexpr double kNoFraction = 4503599627370496.0;  // 2^52: every double beyond is whole
  if (!(millis > -kNoFraction && millis < kNoFraction)) return seconds;
  return static_cast<double>(nearest_integer(millis)) / 1000;
}

}  // namespace crun
