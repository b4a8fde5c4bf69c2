// Gloo backend of ProcessGroup: CPU collectives over TCP (gloo::transport::tcp).
//
// Contract
//   - make_gloo_process_group() connects a full mesh of `size` ranks through `store` (every
//     rank publishes its address under the store's keys; use a store prefix fresh for each
//     restart) and returns when all pairs are connected, or throws InitError by
//     `options.timeout`. The store is used only during this call.
//   - all_reduce path (AllreduceAlgo::kAuto, the default) is the unbound-buffer
//     gloo::allreduce() entry point with 4 MiB segments, chosen from measurements on this 2-core
//     VM, Debian Gloo 0.5, loopback (docs/benchmarks.md, section worker_runtime):
//       * 64 MiB: gloo::allreduce() 0.75-0.80 GB/s (1 MiB default segments: 0.67-0.70);
//         Gloo's AllreduceRingChunked 0.16-0.2 GB/s when built per call (two full-size inbox
//         mallocs whose pages fault in, plus buffer registration with both neighbours), and
//         0.6-0.65 GB/s even when cached per (dtype, op, count) with data copied in and out.
//       * Mixing the two families on one context is pathological: after a ring all_reduce, the
//         next gloo::allreduce() of 1.2 MB took ~0.9 s instead of ~2 ms (3 ranks). So one path
//         serves every call, and it must be the one that also takes per-operation deadlines and
//         custom reductions (bfloat16).
//       The 0.07 GB/s for gloo::allreduce() (64 KiB MTU on lo) did not reproduce with
//       this Gloo build. kRingChunked / kRing force the cached ring, for the benchmark only.
//     Deadline: the call's `timeout`, else the group's. (The ring's deadline is the group's
//     timeout, fixed when pairs are created; an explicit timeout or bfloat16 falls back to
//     gloo::allreduce() there.)
//   - dtypes: float32, float64, int32, int64, float16 (gloo::float16), bfloat16 (reductions
//     computed in float and rounded to nearest even), uint8 (data movement only).
//
// Threading
//   As ProcessGroup: one caller thread; operations run in order on the group's worker thread.
#pragma once

#include <memory>
#include <string>

#include "rendezvous/store.h"
#include "worker_runtime/process_group.h"

namespace crun::rt {

struct GlooOptions {
  Millis timeout{300000};  // connect deadline and default per-operation deadline
  // Address the TCP device binds and advertises. Empty: 127.0.0.1 when `loopback`, else the
  // host name (as torch's gloo does). The runtime fills it with the local address of its route to
  // MASTER_ADDR: a host name can resolve to 127.0.0.1 (Debian's /etc/hosts, network namespaces),
  // which peers on other hosts cannot reach.
  std::string hostname;
  std::string iface;  // GLOO_SOCKET_IFNAME: bind to this interface instead (wins over hostname)
  bool loopback = false;
  enum class AllreduceAlgo { kAuto, kRingChunked, kRing, kGlooAllreduce } allreduce = AllreduceAlgo::kAuto;
  std::size_t segment_bytes = 4u << 20;  // gloo::allreduce() segment size; 0 = Gloo's default (1 MiB)
};

std::unique_ptr<ProcessGroup> make_gloo_process_group(crun::Store& store, int rank, int size,
                                                      const GlooOptions& options = {});

}  // namespace crun::rt
