// worker_runtime/types: half and bfloat16 conversions.
#include <catch2/catch.hpp>

#include "worker_runtime/types.h"

using namespace crun::rt;

TEST_CASE("half and bfloat16 conversions round to nearest even", "[types]") {
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(1e6f) == 0x7C00);
  CHECK(half_to_float(float_to_half(5.960464477539063e-08f)) == 5.960464477539063e-08f);
  CHECK(bf16_to_float(float_to_bf16(3.0f)) == 3.0f);
  CHECK(float_to_bf16(1.00390625f) == 0x3F80);  // tie -> even
  CHECK(dtype_size(DType::kBFloat16) == 2);
}
