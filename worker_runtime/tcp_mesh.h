// TcpMesh (internal): one TCP connection to every other rank of a group, driven by the thread
// that runs the collective (no I/O thread), for the latency-bound collectives of the Gloo group.
//
// Why: Gloo 0.5's TCP transport reads on its own epoll thread, which spins on a level-triggered
// event whenever it cannot take a pair's lock, while the collective's thread holds it to post
// its sends. On this 2-core VM the spinning threads of two ranks filled both cores, and a 4 KiB
// all_reduce then took a scheduler tick (4 ms) instead of ~0.3 ms. Here the thread that waits is
// the one that reads: one poll() per wake-up, nothing spins.
//
// Contract
//   - connect() listens on the address of `iface` when given, else on `host` (a name or a
//     numeric address; the first of its addresses that binds), port chosen by the kernel;
//     publishes "<key_prefix><rank>" = "<address> <port>" in `store`; connects to every lower
//     rank and accepts every higher rank (each connection starts with a hello naming its rank and
//     the world size). It returns when the full mesh is up, or throws InitError by `timeout`.
//   - exchange() runs one step of a collective: for every Transfer it sends `send_bytes` to
//     `peer` and receives exactly `recv_bytes` from it, all at once (no order between peers, so
//     no deadlock whatever the sizes). Each message carries a sequence number and its length; a
//     peer that sent anything else means the ranks issued different collectives: an error.
//   - Failures (peer closed or reset, deadline passed, framing mismatch) throw MeshError naming
//     the peer. The mesh is then out of step and must not be used again (the process group
//     marks itself broken).
//
// Threading
//   One thread at a time calls exchange() (the process group runs operations one by one).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/store.h"

namespace crun::rt {

class MeshError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TcpMesh {
 public:
  struct Transfer {
    int peer = -1;
    const void* send = nullptr;
    std::size_t send_bytes = 0;
    void* recv = nullptr;
    std::size_t recv_bytes = 0;
  };

  static std::unique_ptr<TcpMesh> connect(crun::Store& store, const std::string& key_prefix, int rank, int size,
                                          const std::string& host, const std::string& iface,
                                          std::chrono::milliseconds timeout);
  ~TcpMesh();
  TcpMesh(const TcpMesh&) = delete;
  TcpMesh& operator=(const TcpMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(fds_.size()); }

  void exchange(std::span<const Transfer> transfers, std::chrono::steady_clock::time_point deadline);

 private:
  TcpMesh(int rank, int size);
  int rank_;
  std::vector<int> fds_;                // by peer rank; -1 for this rank
  std::vector<std::uint64_t> seq_out_;  // messages sent to each peer
  std::vector<std::uint64_t> seq_in_;   // messages received from each peer
};

}  // namespace crun::rt
