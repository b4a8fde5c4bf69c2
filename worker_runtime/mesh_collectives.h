// Collectives over a TcpMesh (internal), built from exchanges in which every rank sends one
// message to every peer and receives one from each, at once.
//
// Contract
//   - mesh_all_reduce: one exchange. Every rank sends its whole buffer to every peer and reduces
//     the N contributions in rank order, ((x0 op x1) op x2) ..., so every rank computes the same
//     bits. One round trip: the latency-optimal choice for small buffers; per rank it sends
//     (N-1) x bytes.
//   - mesh_all_reduce_sliced: a reduce-scatter then an all-gather. The buffer is cut into N
//     slices; rank r receives slice r from every peer, reduces it in rank order, and sends the
//     result to every peer. Two round trips; per rank it sends 2(N-1)/N x bytes (the same bytes
//     as a ring: for 2 ranks, this is the ring) and reduces only its slice.
//   - mesh_reduce_scatter: `input` holds N slices of `count` elements; rank r sends slice p to
//     peer p, receives slice r from every peer and writes their reduction (in rank order) to
//     `output`. Per rank it sends (N-1)/N of the input, the minimum for any algorithm.
//   - mesh_barrier: returns once every rank has entered it (one empty message each way per peer).
//   - Exchanges carry at most `chunk_bytes` per peer (several rounds for big buffers), so
//     `scratch` stays at most about N x chunk_bytes; it is reused between calls (fresh pages are
//     expensive to fault in). Every rank must pass the same chunk_bytes.
//   - `reduce(c, a, b, n)` computes c[i] = a[i] op b[i]; c may be a or b. Errors are TcpMesh's
//     MeshError.
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

struct MeshScratch {
  std::vector<std::uint8_t> bytes;
  std::size_t chunk_bytes = 8u << 20;
};

void mesh_all_reduce(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size, const ReduceFn& reduce,
                     Deadline deadline, MeshScratch& scratch);

void mesh_all_reduce_sliced(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size,
                            const ReduceFn& reduce, Deadline deadline, MeshScratch& scratch);

void mesh_reduce_scatter(TcpMesh& mesh, const void* input, void* output, std::size_t count, std::size_t elem_size,
                         const ReduceFn& reduce, Deadline deadline, MeshScratch& scratch);

void mesh_barrier(TcpMesh& mesh, Deadline deadline);

}  // namespace crun::rt
