// Gloo backend of ProcessGroup: CPU collectives over TCP (gloo::transport::tcp).
//
// Contract
//   - make_gloo_process_group() connects a full mesh of `size` ranks through `store` (every
//     rank publishes its address under the store's keys; use a store prefix fresh for each
//     restart) and returns when all pairs are connected, or throws InitError by
//     `options.timeout`. The store is used only during this call.
//   - all_reduce path (AllreduceAlgo::kAuto, the default), chosen from measurements on this
//     2-core VM, Debian Gloo 0.5, loopback (docs/benchmarks.md, section worker_runtime):
//       * below 1 MiB: Gloo's AllreduceRingChunked, one cached instance per (dtype, op, count)
//         with its own buffer (data copied in and out). Constructing a ring per call costs two
//         full-size mallocs whose pages then fault in, plus buffer registration with both
//         neighbours: uncached, 64 MiB ran at ~0.16-0.2 GB/s; cached, small messages pay only
//         the ring's round trips.
//       * from 1 MiB: the newer gloo::allreduce() entry point with 4 MiB segments: 0.75-0.80 GB/s
//         at 64 MiB and 1.1 GB/s at 16 MiB here, versus 0.6-0.65 for the cached ring (whose two
//         copies cost as much as the wire time). The 0.07 GB/s for gloo::allreduce()
//         (64 KiB MTU on lo) did not reproduce with this Gloo build: its default 1 MiB
//         segments gave 0.67-0.70 GB/s.
//     kRingChunked / kRing / kGlooAllreduce force one path (the benchmark compares them).
//     The ring's deadline is the group's timeout (fixed when pairs are created); a call with an
//     explicit, different timeout, and every bfloat16 reduction, goes through gloo::allreduce(),
//     which takes a per-operation deadline and a custom reduction.
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
  // host name (as torch's gloo does).
  std::string hostname;
  bool loopback = false;
  enum class AllreduceAlgo { kAuto, kRingChunked, kRing, kGlooAllreduce } allreduce = AllreduceAlgo::kAuto;
  std::size_t segment_bytes = 4u << 20;  // gloo::allreduce() segment size; 0 = Gloo's default (1 MiB)
  std::size_t auto_threshold_bytes = 1u << 20;  // kAuto: ring below, gloo::allreduce() from here
};

std::unique_ptr<ProcessGroup> make_gloo_process_group(crun::Store& store, int rank, int size,
                                                      const GlooOptions& options = {});

}  // namespace crun::rt
