// GpuMemory: the memory used on each GPU of this host, for the `gpu` node check; and the rule
// that says whether it is back to the level measured before the job's first start.
//
// Contract
//   - GpuMemory::read(): the bytes used on each device, in NVML's index order, or an error (one
//     line: which device does not answer and why). An interface so that a test double can stand
//     in for the GPUs.
//   - open_nvml_memory(): NVML opened at run time with dlopen("libnvidia-ml.so.1") (crun does not
//     link NVML); nullptr when the library cannot be loaded, nvmlInit fails or there is no device
//     (the check does not apply). Devices are every one NVML lists (it ignores
//     CUDA_VISIBLE_DEVICES). The library stays loaded and initialised for the process' life.
//   - gpu_memory_back(baseline, now, margin): "" when every device's used bytes are at most its
//     baseline plus `margin`, else one line naming the first device that is not, with both
//     figures in MiB; a device count that changed is an answer of its own.
//
// Threading
//   read() blocks for NVML's calls (microseconds to milliseconds); call it from one thread at a
//   time. gpu_memory_back is pure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace crun {

struct GpuMemoryReading {
  std::vector<std::uint64_t> used_bytes;  // per device
  std::string error;                      // non-empty: a device did not answer
};

class GpuMemory {
 public:
  virtual ~GpuMemory() = default;
  virtual GpuMemoryReading read() = 0;
};

std::unique_ptr<GpuMemory> open_nvml_memory();

std::string gpu_memory_back(const std::vector<std::uint64_t>& baseline, const std::vector<std::uint64_t>& now,
                            std::uint64_t margin);

}  // namespace crun
