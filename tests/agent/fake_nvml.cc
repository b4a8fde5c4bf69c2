// A stand-in for libnvidia-ml.so.1, built only for the tests: the few NVML functions crun calls
// (agent/gpu_memory.cc), answering from a file instead of GPUs. CRUN_FAKE_NVML_FILE names a file
// holding each device's used memory in MiB, separated by blanks ("x" for a device that does not
// answer); it is read on every call, so a test changes the GPUs' memory by rewriting it.
// Without the variable (or the file) nvmlInit fails, as on a host without a driver.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kUnknown = 999;

struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Each device's used MiB, -1 for one that does not answer; false when there is no file.
bool devices(std::vector<long long>& out) {
  const char* path = std::getenv("CRUN_FAKE_NVML_FILE");
  if (path == nullptr) return false;
  std::ifstream in(path);
  if (!in) return false;
  std::string word;
  while (in >> word) out.push_back(word == "x" ? -1 : std::atoll(word.c_str()));
  return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  std::vector<long long> d;
  return devices(d) ? kSuccess : kUninitialized;
}

__attribute__((visibility("default"))) int nvmlShutdown() { return kSuccess; }

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
  std::vector<long long> d;
  if (!devices(d)) return kUninitialized;
  *count = static_cast<unsigned int>(d.size());
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) + 1);
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  std::vector<long long> d;
  if (!devices(d)) return kUninitialized;
  const auto index = reinterpret_cast<std::uintptr_t>(device) - 1;
  if (index >= d.size()) return kInvalidArgument;
  if (d[index] < 0) return kUnknown;
  memory->total = 80ull << 30;
  memory->used = static_cast<unsigned long long>(d[index]) << 20;
  memory->free = memory->total - memory->used;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int result) {
  return result == kUnknown ? "Unknown Error" : result == kUninitialized ? "Uninitialized" : "Invalid Argument";
}

}  // extern "C"
