// Collectives over a TcpMesh. See mesh_collectives.h for the contract.
#include "worker_runtime/mesh_collectives.h"

#include <algorithm>
#include <cstring>

namespace crun::rt {
namespace {

using Transfers = std::vector<TcpMesh::Transfer>;

// out = ((in[0] op in[1]) op in[2]) ...; `out` may be in[0] or in[1], never a later input.
void reduce_in_rank_order(void* out, const std::vector<const void*>& in, std::size_t count, const ReduceFn& reduce) {
  reduce(out, in[0], in[1], count);
  for (std::size_t r = 2; r < in.size(); ++r) reduce(out, out, in[r], count);
}

// Element ranges of the N slices (rank r's slice: [off[r], off[r] + len[r])).
struct Slices {
  std::vector<std::size_t> off, len;
  std::size_t longest() const { return *std::max_element(len.begin(), len.end()); }
};

std::size_t chunk_elems(const MeshScratch& s, std::size_t elem_size) {
  return std::max<std::size_t>(1, s.chunk_bytes / elem_size);
}

std::size_t part(std::size_t len, std::size_t first, std::size_t chunk) {
  return first >= len ? 0 : std::min(chunk, len - first);
}

// Rank `me` receives its slice of every peer's `in` and writes the reduction in rank order to
// `out` (which may be its own slice of `in`). In rounds of at most one chunk per peer; every rank
// runs the same number of rounds (Slices are the same on every rank).
void reduce_scatter_rounds(TcpMesh& mesh, const std::uint8_t* in, const Slices& s, std::uint8_t* out,
                           std::size_t es, const ReduceFn& reduce, Deadline deadline, MeshScratch& scratch) {
  const int n = mesh.size(), me = mesh.rank();
  const auto m = static_cast<std::size_t>(me);
  const std::size_t chunk = chunk_elems(scratch, es), longest = s.longest();
  const std::size_t slot_bytes = std::min(longest, chunk) * es;
  // Our own contribution needs a copy when `out` is our slice and we come after rank 1 in the
  // order: by our turn the running result has overwritten it.
  const bool copy_own = out == in + s.off[m] * es && me >= 2;
  const auto slots = static_cast<std::size_t>(n - 1 + (copy_own ? 1 : 0));
  if (scratch.bytes.size() < slots * slot_bytes) scratch.bytes.resize(slots * slot_bytes);
  auto slot = [&](int r) {
    const auto i = static_cast<std::size_t>(r == me ? n - 1 : (r < me ? r : r - 1));
    return scratch.bytes.data() + i * slot_bytes;
  };
  Transfers transfers(static_cast<std::size_t>(n - 1));
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  for (std::size_t first = 0; first < longest; first += chunk) {
    const std::size_t mine = part(s.len[m], first, chunk);
    for (int p = 0, k = 0; p < n; ++p) {
      if (p == me) continue;
      const auto q = static_cast<std::size_t>(p);
      transfers[static_cast<std::size_t>(k++)] = {p, in + (s.off[q] + first) * es, part(s.len[q], first, chunk) * es,
                                                  slot(p), mine * es};
    }
    mesh.exchange(transfers, deadline);
    if (mine == 0) continue;
    const std::uint8_t* own = in + (s.off[m] + first) * es;
    if (copy_own) {
      std::memcpy(slot(me), own, mine * es);
      own = slot(me);
    }
    for (int r = 0; r < n; ++r) inputs[static_cast<std::size_t>(r)] = r == me ? own : slot(r);
    reduce_in_rank_order(out + first * es, inputs, mine, reduce);
  }
}

// Every rank sends its slice of `data` to every peer and receives theirs in place.
void all_gather_rounds(TcpMesh& mesh, std::uint8_t* data, const Slices& s, std::size_t es, Deadline deadline,
                       const MeshScratch& scratch) {
  const int n = mesh.size(), me = mesh.rank();
  const auto m = static_cast<std::size_t>(me);
  const std::size_t chunk = chunk_elems(scratch, es), longest = s.longest();
  Transfers transfers(static_cast<std::size_t>(n - 1));
  for (std::size_t first = 0; first < longest; first += chunk) {
    for (int p = 0, k = 0; p < n; ++p) {
      if (p == me) continue;
      const auto q = static_cast<std::size_t>(p);
      transfers[static_cast<std::size_t>(k++)] = {p, data + (s.off[m] + first) * es, part(s.len[m], first, chunk) * es,
                                                  data + (s.off[q] + first) * es, part(s.len[q], first, chunk) * es};
    }
    mesh.exchange(transfers, deadline);
  }
}

}  // namespace

void mesh_all_reduce(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size, const ReduceFn& reduce,
                     Deadline deadline, MeshScratch& scratch) {
  const int n = mesh.size();
  if (n == 1 || count == 0) return;
  // Every rank's "slice" is the whole buffer, sent to every peer.
  Slices s{std::vector<std::size_t>(static_cast<std::size_t>(n), 0), std::vector<std::size_t>(static_cast<std::size_t>(n), count)};
  auto* bytes = static_cast<std::uint8_t*>(data);
  const std::size_t chunk = chunk_elems(scratch, elem_size);
  // Each chunk is one reduce-scatter round whose "slices" all cover that chunk.
  for (std::size_t first = 0; first < count; first += chunk) {
    const std::size_t len = std::min(chunk, count - first);
    std::fill(s.len.begin(), s.len.end(), len);
    reduce_scatter_rounds(mesh, bytes + first * elem_size, s, bytes + first * elem_size, elem_size, reduce, deadline,
                          scratch);
  }
}

void mesh_all_reduce_sliced(TcpMesh& mesh, void* data, std::size_t count, std::size_t elem_size,
                            const ReduceFn& reduce, Deadline deadline, MeshScratch& scratch) {
  const auto n = static_cast<std::size_t>(mesh.size());
  if (n == 1 || count == 0) return;
  const std::size_t each = (count + n - 1) / n;
  Slices s;
  for (std::size_t r = 0; r < n; ++r) {
    s.off.push_back(std::min(r * each, count));
    s.len.push_back(std::min(each, count - s.off.back()));
  }
  auto* bytes = static_cast<std::uint8_t*>(data);
  const auto me = static_cast<std::size_t>(mesh.rank());
  reduce_scatter_rounds(mesh, bytes, s, bytes + s.off[me] * elem_size, elem_size, reduce, deadline, scratch);
  all_gather_rounds(mesh, bytes, s, elem_size, deadline, scratch);
}

void mesh_reduce_scatter(TcpMesh& mesh, const void* input, void* output, std::size_t count, std::size_t elem_size,
                         const ReduceFn& reduce, Deadline deadline, MeshScratch& scratch) {
  const auto n = static_cast<std::size_t>(mesh.size());
  if (count == 0) return;
  if (n == 1) {
    std::memmove(output, input, count * elem_size);
    return;
  }
  Slices s;
  for (std::size_t r = 0; r < n; ++r) {
    s.off.push_back(r * count);
    s.len.push_back(count);
  }
  reduce_scatter_rounds(mesh, static_cast<const std::uint8_t*>(input), s, static_cast<std::uint8_t*>(output), elem_size,
                        reduce, deadline, scratch);
}

void mesh_barrier(TcpMesh& mesh, Deadline deadline) {
  Transfers transfers;
  for (int p = 0; p < mesh.size(); ++p) {
    if (p != mesh.rank()) transfers.push_back({p, nullptr, 0, nullptr, 0});
  }
  mesh.exchange(transfers, deadline);
}

}  // namespace crun::rt
