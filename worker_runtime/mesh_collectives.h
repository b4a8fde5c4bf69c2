// Collectives over a TcpMesh (internal), each one a single exchange: every rank sends one
// message to every peer and receives one from each, then reduces locally. One round trip, no
// pipeline: latency-optimal, which is what small buffers need.
//
// Contract
//   - mesh_all_reduce: every rank sends its whole buffer to every peer and reduces the N
//     contributions in rank order, ((x0 op x1) op x2) ..., so every rank computes the same bits
//     (deterministic for a fixed world size). Traffic per rank: (N-1) x bytes each way, the same
//     as a ring for 2 ranks, N/2 times a ring's beyond; the process group sends only small
//     buffers this way when N > 2.
//   - mesh_reduce_scatter: `input` holds N slices of `count` elements; rank r sends slice p to
//     peer p, receives slice r from every peer and writes their reduction (in rank order) to
//     `output`. Traffic per rank: (N-1)/N of the input each way, the minimum for any algorithm.
//   - mesh_barrier: returns once every rank has entered it (one empty message each way per peer).
//   - `reduce(c, a, b, n)` computes c[i] = a[i] op b[i]; c may be a or b. `scratch` is reused
//     between calls to avoid an allocation per call. Errors are TcpMesh's MeshError.
//
// Threading
//   As TcpMesh: one thread at a time per mesh (and per scratch buffer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "worker_runtime/tcp_mesh.h"

namespace crun::rt {

using ReduceFn = std::function<void(void*, const void*, const void*, std::size_t)>;
using Deadline = std::chrono::steady_clock::time_point;

void mesh_all_reduce(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size, const ReduceFn& reduce,
                     Deadline deadline, std::vector<std::uint8_t>& scratch, std::size_t chunk_bytes);

void mesh_reduce_scatter(TcpMesh& mesh, const void* input, void* output, std::size_t count, std::size_t elem_size,
                         const ReduceFn& reduce, Deadline deadline, std::vector<std::uint8_t>& scratch,
                         std::size_t chunk_bytes);

void mesh_barrier(TcpMesh& mesh, Deadline deadline);

}  // namespace crun::rt
