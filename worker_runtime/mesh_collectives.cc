// Single-exchange collectives over a TcpMesh. See mesh_collectives.h for the contract.
#include "worker_runtime/mesh_collectives.h"

#include <algorithm>
#include <cstring>

namespace crun::rt {
namespace {

// out = ((in[0] op in[1]) op in[2]) ...; `out` may be in[0] or in[1], never a later input.
void reduce_in_rank_order(void* out, const std::vector<const void*>& in, std::size_t count, const ReduceFn& reduce) {
  reduce(out, in[0], in[1], count);
  for (std::size_t r = 2; r < in.size(); ++r) reduce(out, out, in[r], count);
}

}  // namespace

void mesh_all_reduce(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size, const ReduceFn& reduce,
                     Deadline deadline, std::vector<std::uint8_t>& scratch, std::size_t chunk_bytes) {
  const int n = mesh.size(), me = mesh.rank();
  if (n == 1 || count == 0) return;
  const std::size_t chunk_elems = std::max<std::size_t>(1, chunk_bytes / elem_size);
  const std::size_t slot_bytes = std::min(count, chunk_elems) * elem_size;
  // A slot per peer, plus one for our own contribution when we come after rank 1 in the order
  // (by our turn the running result has overwritten `data`).
  const std::size_t slots = static_cast<std::size_t>(me >= 2 ? n : n - 1);
  if (scratch.size() < slots * slot_bytes) scratch.resize(slots * slot_bytes);
  auto slot = [&](int r) {
    const std::size_t i = r == me ? static_cast<std::size_t>(n - 1) : static_cast<std::size_t>(r < me ? r : r - 1);
    return scratch.data() + i * slot_bytes;
  };
  std::vector<TcpMesh::Transfer> transfers(static_cast<std::size_t>(n - 1));
  std::vector<const void*> in(static_cast<std::size_t>(n));
  auto* bytes = static_cast<std::uint8_t*>(data);
  for (std::size_t first = 0; first < count; first += chunk_elems) {
    const std::size_t elems = std::min(chunk_elems, count - first);
    std::uint8_t* part = bytes + first * elem_size;
    const std::size_t len = elems * elem_size;
    for (int p = 0, k = 0; p < n; ++p) {
      if (p != me) transfers[static_cast<std::size_t>(k++)] = {p, part, len, slot(p), len};
    }
    mesh.exchange(transfers, deadline);
    for (int r = 0; r < n; ++r) in[static_cast<std::size_t>(r)] = r == me ? part : slot(r);
    if (me >= 2) {
      std::memcpy(slot(me), part, len);
      in[static_cast<std::size_t>(me)] = slot(me);
    }
    reduce_in_rank_order(part, in, elems, reduce);
  }
}

void mesh_reduce_scatter(TcpMesh& mesh, const void* input, void* output, std::size_t count, std::size_t elem_size,
                         const ReduceFn& reduce, Deadline deadline, std::vector<std::uint8_t>& scratch,
                         std::size_t chunk_bytes) {
  const int n = mesh.size(), me = mesh.rank();
  const std::size_t slice_bytes = count * elem_size;
  const auto* in_bytes = static_cast<const std::uint8_t*>(input);
  auto* out_bytes = static_cast<std::uint8_t*>(output);
  if (slice_bytes == 0) return;
  if (n == 1) {
    std::memmove(output, input, slice_bytes);
    return;
  }
  const std::size_t chunk_elems = std::max<std::size_t>(1, chunk_bytes / elem_size);
  const std::size_t slot_bytes = std::min(count, chunk_elems) * elem_size;
  if (scratch.size() < static_cast<std::size_t>(n - 1) * slot_bytes) scratch.resize(static_cast<std::size_t>(n - 1) * slot_bytes);
  auto slot = [&](int r) { return scratch.data() + static_cast<std::size_t>(r < me ? r : r - 1) * slot_bytes; };
  std::vector<TcpMesh::Transfer> transfers(static_cast<std::size_t>(n - 1));
  std::vector<const void*> in(static_cast<std::size_t>(n));
  for (std::size_t first = 0; first < count; first += chunk_elems) {
    const std::size_t off = first * elem_size, len = std::min(chunk_elems, count - first) * elem_size;
    for (int p = 0, k = 0; p < n; ++p) {
      if (p != me) transfers[static_cast<std::size_t>(k++)] = {p, in_bytes + slice_bytes * static_cast<std::size_t>(p) + off, len, slot(p), len};
    }
    mesh.exchange(transfers, deadline);
    for (int r = 0; r < n; ++r) {
      in[static_cast<std::size_t>(r)] = r == me ? in_bytes + slice_bytes * static_cast<std::size_t>(me) + off : slot(r);
    }
    reduce_in_rank_order(out_bytes + off, in, len / elem_size, reduce);
  }
}

void mesh_barrier(TcpMesh& mesh, Deadline deadline) {
  std::vector<TcpMesh::Transfer> transfers;
  for (int p = 0; p < mesh.size(); ++p) {
    if (p != mesh.rank()) transfers.push_back({p, nullptr, 0, nullptr, 0});
  }
  mesh.exchange(transfers, deadline);
}

}  // namespace crun::rt
