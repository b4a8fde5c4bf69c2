// cpuid_cost: what one `cpuid` instruction costs on this machine, in microseconds.
//   cpuid_cost
// Every process start runs glibc's probing of the CPU and its caches (ld.so's, or a static
// program's own start: init_cpu_features, and handle_amd or handle_intel per cache level), a few
// dozen `cpuid`s. On bare metal one is ~0.1 us; a virtual machine traps each to its hypervisor,
// and on this project's VM one costs several microseconds, so the instruction is a fixed share
// of every process start, the process floor's and crun's alike, and moves with the host's load.
// bench/rendezvous/run.py --shared-endpoint prints it beside its floors, before and after.
// 200 rounds of 10 `cpuid`s (leaf 0x8000001D, AMD's cache topology, the leaf glibc asks most on
// this VM; on Intel leaf 4, the same role), timed with CLOCK_MONOTONIC; prints the median and the
// least round's cost of one `cpuid`. Bounded (2,000 instructions); x86-64 only (not built
// elsewhere); exit 2 for usage.
#include <cpuid.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

}  // namespace

int main(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: cpuid_cost\n");
    return 2;
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(0, a, b, c, d);
  const bool amd = b == 0x68747541;  // "Auth" of "AuthenticAMD"
  const unsigned leaf = amd ? 0x8000001D : 4;
  constexpr int kRounds = 200, kPerRound = 10;
  std::vector<double> per_cpuid;
  per_cpuid.reserve(kRounds);
  for (int r = 0; r < kRounds; ++r) {
    const double t0 = now_us();
    for (int i = 0; i < kPerRound; ++i) {
      __cpuid_count(leaf, static_cast<unsigned>(i & 3), a, b, c, d);  // volatile asm: never elided
    }
    per_cpuid.push_back((now_us() - t0) / kPerRound);
  }
  std::sort(per_cpuid.begin(), per_cpuid.end());
  std::printf("cpuid (leaf 0x%x): median %.2f us, least %.2f us\n", leaf, per_cpuid[kRounds / 2], per_cpuid[0]);
  return 0;
}
