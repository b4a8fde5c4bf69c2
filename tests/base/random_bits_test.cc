// base/random_bits.h: ids drawn from the kernel's generator, every bit of them used.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>

#include "base/random_bits.h"

TEST_CASE("random_bits: 1,000 draws, all distinct, no bit stuck at 0 or 1", "[random_bits]") {
  std::set<std::uint64_t> seen;
  std::uint64_t any_one = 0, any_zero = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t r = crun::random_bits();
    seen.insert(r);
    any_one |= r;
    any_zero |= ~r;
  }
  CHECK(seen.size() == 1000);
  CHECK(any_one == ~std::uint64_t{0});
  CHECK(any_zero == ~std::uint64_t{0});
}
