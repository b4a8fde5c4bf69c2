// Gloo backend of ProcessGroup: CPU collectives over TCP (gloo::transport::tcp).
//
// Contract
//   - make_gloo_process_group() connects a full mesh of `size` ranks through `store` (every
//     rank publishes its address under the store's keys; use a store prefix fresh for each
//     restart) and returns when all pairs are connected, or throws InitError by
//     `options.timeout`. The store is used only during this call.
//   - all_reduce uses Gloo's ring algorithms (AllreduceRingChunked by default), not the newer
//     gloo::allreduce() entry point: with Gloo 0.5 on loopback the latter moved 64 MiB at
//     ~0.07 GB/s (it segments into small unbound-buffer messages) while the ring reached ~1 GB/s
//     (it keeps one pre-registered buffer per neighbour and pipelines whole chunks). The ring's
//     deadline is the group's timeout (fixed when pairs are created); a call with an explicit,
//     different timeout, and every bfloat16 reduction, goes through gloo::allreduce() which
//     takes a per-operation deadline and a custom reduction.
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
  enum class AllreduceAlgo { kRingChunked, kRing, kGlooAllreduce } allreduce = AllreduceAlgo::kRingChunked;
  std::size_t segment_bytes = 0;  // gloo::allreduce() segment size; 0 = Gloo's default (1 MiB)
};

std::unique_ptr<ProcessGroup> make_gloo_process_group(crun::Store& store, int rank, int size,
                                                      const GlooOptions& options = {});

}  // namespace crun::rt
