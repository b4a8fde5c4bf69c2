// The state worker's training (tests/support/state_worker.cc), shared with the tests that check
// it: a rank's digest after each step depends only on its global rank and the step, so a run that
// resumed from saved state ends with the digest of one that never stopped.
// Threading: pure functions.
#pragma once

#include <cstdint>

namespace crun::test {

inline std::uint64_t state_step(std::uint64_t digest, int rank, long step) {
  std::uint64_t x = digest ^ (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(step);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline std::uint64_t state_digest(int rank, long steps) {
  std::uint64_t d = 0x9e3779b97f4a7c15ULL;
  for (long s = 0; s < steps; ++s) d = state_step(d, rank, s);
  return d;
}

}  // namespace crun::test
