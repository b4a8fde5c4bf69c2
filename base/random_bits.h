// random_bits(): 64 random bits from the kernel (getrandom(2)), for identifiers (run ids, node
// ids, agent ids) and jitter seeds. Not std::random_device: libstdc++'s probes the CPU with cpuid
// and reads rdseed at each construction, which a virtual machine may trap (in a 1,024-agent run
// here its three per agent were ~1 % of all CPU).
//
// Contract
//   - Never fails: when getrandom cannot answer (a kernel without it, interrupted before the
//     pool is ready), the bits come from the clock and the pid (unique enough for an id; not
//     for secrets, which crun does not make).
//
// Threading
//   Any thread; async-signal-safe apart from the fallback's clock_gettime.
#pragma once

#include <cstdint>

namespace crun {

std::uint64_t random_bits();

}  // namespace crun
