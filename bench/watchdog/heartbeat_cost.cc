// The cost of crun::rt::Runtime::heartbeat(step) on the worker, against the machine's floor for
// the same work done inline (a CLOCK_MONOTONIC read and two stores into a mapped file) and a
// write(2) to a pipe (what a syscall-based heartbeat would cost). Prints ns per call, medians of 5.
//
// Usage: heartbeat_cost [CALLS]   (default 10,000,000; run with no torchrun variables set)
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker_runtime/runtime.h"

namespace {

template <typename F>
double ns_per_call(long calls, F&& f) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) f(i);
    const auto t1 = std::chrono::steady_clock::now();
    runs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(calls));
  }
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

}  // namespace

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 10'000'000;
  char path[] = "/tmp/crun-hb-bench-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0 || ::ftruncate(fd, 16) != 0) return 1;
  ::setenv("CRUN_HEARTBEAT_FILE", path, 1);
  auto rt = crun::rt::Runtime::init();

  const double lib = ns_per_call(calls, [&](long i) { rt->heartbeat(i); });

  auto* slot = static_cast<std::int64_t*>(::mmap(nullptr, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  const double floor = ns_per_call(calls, [&](long i) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    std::atomic_ref<std::int64_t>(slot[0]).store(i, std::memory_order_relaxed);
    std::atomic_ref<std::int64_t>(slot[1]).store(ts.tv_sec * 1'000'000'000LL + ts.tv_nsec, std::memory_order_release);
  });

  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return 1;
  std::vector<char> sink(1 << 16);
  const double syscall = ns_per_call(calls / 10, [&](long i) {
    char b[8];
    std::int64_t v = i;
    __builtin_memcpy(b, &v, 8);
    if (::write(p[1], b, 8) < 0 || (i & 1023) == 1023) {
      while (::read(p[0], sink.data(), sink.size()) > 0) {
      }
    }
  });

  std::printf("heartbeat cost, ns per call (median of 5 x %ld calls)\n", calls);
  std::printf("  Runtime::heartbeat(step)                          %8.1f ns\n", lib);
  std::printf("  floor: clock_gettime + two stores, inline         %8.1f ns   ratio %.2fx\n", floor, lib / floor);
  std::printf("  for scale: write(2) of 8 bytes to a pipe          %8.1f ns\n", syscall);
  ::munmap(slot, 16);
  ::close(fd);
  ::unlink(path);
  rt->finish();
  return 0;
}
