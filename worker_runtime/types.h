// Element types, reduction operators and errors shared by every crun runtime backend.
//
// Contract
//   - DType names the element type of a collective's buffers; dtype_size() gives its bytes.
//     kUInt8 is accepted only by the data-moving collectives (broadcast, gathers, scatter,
//     send/recv), never by reductions.
//   - ReduceOp::kAvg is "sum, then divide by the world size" (integers divide truncating).
//   - Every failure of a collective (peer gone, timeout, unsupported type) is a CollectiveError
//     whose message names the operation and the reason; InitError covers bad environments.
//
// Threading
//   Plain values and exception types: no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace crun::rt {

enum class DType : std::uint8_t { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16, kUInt8 };
enum class ReduceOp : std::uint8_t { kSum, kAvg, kMin, kMax, kProd };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The worker environment is missing or inconsistent; the message names the variables.
class InitError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};
// A collective failed (peer died, deadline passed, unsupported type/op for this backend).
class CollectiveError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// C++ type -> DType, for the typed convenience wrappers.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::kFloat64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::kUInt8; };

// IEEE half and bfloat16 conversions (round to nearest even) for callers that hold 16-bit data.
std::uint16_t float_to_half(float f);
float half_to_float(std::uint16_t h);
std::uint16_t float_to_bf16(float f);
float bf16_to_float(std::uint16_t b);

}  // namespace crun::rt
