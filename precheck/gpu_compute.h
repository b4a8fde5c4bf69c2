// The precheck's parts on the worker's CUDA device, for crun-precheck when its process group is
// NCCL (precheck/precheck_main.cc). Built only where CUDA is found (CRUN_WITH_CUDA).
//
// Contract
//   - time_gpu_sgemm(device, n, repeat): on CUDA device `device` (as the runtime's NCCL group
//     numbers them: LOCAL_RANK among CUDA_VISIBLE_DEVICES), C = A x B with cuBLAS's SGEMM, n x n
//     fp32, `repeat` times, after one untimed call; the device is synchronized before each read
//     of the clock. Returns the seconds of the `repeat` calls.
//   - DeviceFloats(device, count, value): `count` floats of device memory, each `value`, ready
//     (synchronized) when the constructor returns; freed by the destructor.
//   - cuBLAS is not linked: the first time_gpu_sgemm opens it (dlopen, libcublas.so.<CUDA major>,
//     else from the build's toolkit folder), so a CPU run never loads it.
//   - Any CUDA or cuBLAS error, or no cuBLAS to open, throws std::runtime_error with one line.
//
// Threading
//   Use from one thread; each call makes `device` current on it.
#pragma once

#include <cstddef>

namespace crun::precheck {

double time_gpu_sgemm(int device, int n, int repeat);

class DeviceFloats {
 public:
  DeviceFloats(int device, std::size_t count, float value);
  ~DeviceFloats();
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  float* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace crun::precheck
