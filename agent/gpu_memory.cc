#include "agent/gpu_memory.h"

#include <dlfcn.h>

namespace crun {

namespace {

// NVML's C interface, the part crun calls (nvml.h: these signatures are stable ABI).
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using NvmlDevice = void*;
using InitFn = int (*)();
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, NvmlDevice*);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);
using ErrorFn = const char* (*)(int);

class NvmlGpuMemory final : public GpuMemory {
 public:
  NvmlGpuMemory(CountFn count, HandleFn handle, MemoryFn memory, ErrorFn error)
      : count_(count), handle_(handle), memory_(memory), error_(error) {}

  GpuMemoryReading read() override {
    GpuMemoryReading r;
    unsigned int n = 0;
    if (int rc = count_(&n); rc != 0) {
      r.error = "NVML cannot count the GPUs: " + text(rc);
      return r;
    }
    for (unsigned int i = 0; i < n; ++i) {
      NvmlDevice device = nullptr;
      NvmlMemory m{};
      int rc = handle_(i, &device);
      if (rc == 0) rc = memory_(device, &m);
      if (rc != 0) {
        r.error = "GPU " + std::to_string(i) + " does not answer: " + text(rc);
        return r;
      }
      r.used_bytes.push_back(m.used);
    }
    return r;
  }

 private:
  std::string text(int rc) const {
    const char* s = error_ != nullptr ? error_(rc) : nullptr;
    return (s != nullptr ? std::string(s) + " " : std::string()) + "(NVML error " + std::to_string(rc) + ")";
  }
  CountFn count_;
  HandleFn handle_;
  MemoryFn memory_;
  ErrorFn error_;
};

}  // namespace

std::unique_ptr<GpuMemory> open_nvml_memory() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto memory = reinterpret_cast<MemoryFn>(::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto error = reinterpret_cast<ErrorFn>(::dlsym(lib, "nvmlErrorString"));
  unsigned int n = 0;
  if (init == nullptr || count == nullptr || handle == nullptr || memory == nullptr || init() != 0 || count(&n) != 0 ||
      n == 0) {
    return nullptr;  // kept loaded: a library that was initialised is not unloaded under itself
  }
  return std::make_unique<NvmlGpuMemory>(count, handle, memory, error);
}

std::string gpu_memory_back(const std::vector<std::uint64_t>& baseline, const std::vector<std::uint64_t>& now,
                            std::uint64_t margin) {
  if (baseline.size() != now.size()) {
    return std::to_string(now.size()) + " GPUs answer, " + std::to_string(baseline.size()) + " did before the first start";
  }
  constexpr std::uint64_t mib = 1 << 20;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (now[i] > baseline[i] + margin) {
      return "GPU " + std::to_string(i) + " still holds " + std::to_string(now[i] / mib) + " MiB (" +
             std::to_string(baseline[i] / mib) + " MiB before the first start)";
    }
  }
  return "";
}

}  // namespace crun
