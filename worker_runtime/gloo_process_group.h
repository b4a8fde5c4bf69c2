// Gloo backend of ProcessGroup: CPU collectives over TCP (gloo::transport::tcp).
//
// Contract
//   - make_gloo_process_group() connects a full mesh of `size` ranks through `store` (every
//     rank publishes its address under the store's keys; use a store prefix fresh for each
//     restart) and returns when all pairs are connected, or throws InitError by
//     `options.timeout`. The store is used only during this call.
//   - Besides Gloo's context, the group connects a TcpMesh (tcp_mesh.h): one more TCP connection
//     per pair of ranks, on the same address, read by the thread that runs the operation.
//   - all_reduce path (AllreduceAlgo::kAuto, the default), chosen from measurements on this 2-core
//     VM, Debian Gloo 0.5, loopback (docs/benchmarks.md, section worker_runtime):
//       * (size-1) x bytes <= `direct_max_bytes` (384 KiB): one exchange of whole buffers over the
//         mesh (mesh_all_reduce). 4 KiB takes ~0.03-0.06 ms, against ~4 ms through Gloo 0.5,
//         whose TCP loop thread spins on a pair lock it cannot take while the collective's
//         thread holds it: two ranks' spinners fill both cores until the next scheduler tick.
//         From ~512 KiB the sliced path below is faster (a whole buffer no longer fits the
//         loopback sockets' buffers): 384 KiB 3.1 GB/s direct against 2.4 sliced, 768 KiB 2.2
//         against 3.0 (2 ranks pinned, medians of 8 interleaved; the same order unpinned).
//       * bigger, 2 ranks: the mesh's reduce-scatter + all-gather (mesh_all_reduce_sliced: a
//         ring's bytes, each rank reduces half): 64 MiB 1.8-2.4 GB/s against 1.3-1.6 through
//         gloo::allreduce() in the same runs (measured beside it in docs/benchmarks.md's history).
//       * bigger, more ranks: the unbound-buffer gloo::allreduce() ring, 4 MiB segments. Gloo's
//         AllreduceRingChunked was slower when built per call (two full-size inbox mallocs
//         whose pages fault in, ~4 ms per MiB on this VM, plus buffer registration with both
//         neighbours), and no faster when cached per (dtype, op, count); mixing that
//         bound-buffer family with the unbound collectives on one context stalled later calls
//         (after a ring all_reduce, a gloo::allreduce() of 1.2 MB took ~0.9 s instead of ~2 ms,
//         3 ranks).
//       kDirect / kSliced force a mesh path, kGlooAllreduce Gloo's unbound ring, kRingChunked /
//       kRing the cached bound-buffer ring (benchmark only).
//     Every path reduces in an order fixed by the world size and the count, so results are
//     deterministic. Deadline: the call's `timeout`, else the group's. (The cached ring's
//     deadline is the group's timeout, fixed when pairs are created; an explicit timeout or
//     bfloat16 falls back to gloo::allreduce() there.)
//   - reduce_scatter (mesh_reduce_scatter: each rank receives only its slice, (N-1)/N of the
//     input) and barrier run over the mesh too; the other collectives are Gloo's.
//   - dtypes: float32, float64, int32, int64, float16 (gloo::float16), bfloat16 (reductions
//     computed in float and rounded to nearest even), uint8 (data movement only).
//
// Threading
//   As ProcessGroup: one caller thread; operations run one at a time, in order, on the group's
//   queue thread or on the thread waiting for them (op_queue.h); with world size 1 at once, on
//   the caller's thread.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"
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
  enum class AllreduceAlgo { kAuto, kRingChunked, kRing, kGlooAllreduce, kDirect, kSliced } allreduce = AllreduceAlgo::kAuto;
  std::size_t segment_bytes = 4u << 20;  // gloo::allreduce() segment size; 0 = Gloo's default (1 MiB)
  // kAuto: the single exchange over the mesh when (size - 1) x bytes is at most this.
  std::size_t direct_max_bytes = 384u << 10;
  // The mesh collectives move at most this / (size - 1) bytes per peer per round (its receive
  // slots, kept for the group's life, stay about this big). Every rank must use the same value.
  // Small enough that a round's received slot is still in cache when it is reduced: 64 MiB,
  // 2 ranks pinned, 2.3 GB/s with 0.5-2 MiB against 1.9 with 8 MiB (bench/runtime/run_bench.py --pin
  // with this value varied).
  std::size_t mesh_scratch_bytes = 2u << 20;
};

std::unique_ptr<ProcessGroup> make_gloo_process_group(crun::Store& store, int rank, int size,
                                                      const GlooOptions& options = {});

}  // namespace crun::rt
