// The replication connections this agent opens: ReplicaPusher sends this node's ranks' committed
// sets to the next node of the ring; fetch_replicas asks the round's peers for ranks this node
// was given without their state (agent/state_replication.h puts them to use).
//
// Contract
//   ReplicaPusher
//     - retarget(peer, ranks): a new round. The successor (node rank (i+1) % nodes; none alone)
//       and this node's global ranks; every one of them is due (the successor may hold none).
//     - changed(rank): the rank's committed set changed. Sets go one at a time on one
//       connection; a rank that changes again while a set is on its way is sent once more after
//       it, with its newest set only (changes coalesce: at most one pending send per rank).
//       Memory: one set's open descriptors; file bytes go by sendfile.
//     - A connection that fails: one line (the first of a run of failures), the due ranks kept,
//       retried after a second.
//     - on_acked (optional): the successor stored (or already held newer than) a set.
//   fetch_replicas(peers, ranks, ...): asks every peer, in parallel, for the newest sequence it
//     holds of each rank, then gets each rank from the peer with the newest one; each set is
//     written to a temporary directory under `incoming_root` (its files complete: a set cut
//     short is removed). `done` runs once: the sets fetched (a rank no peer holds is missing),
//     and "" or one line saying what failed (a peer unreachable, the deadline passed).
//
// Threading
//   The agent's loop: every call and callback. Destroying the pusher closes its connection;
//   fetch_replicas' `done` may be cancelled by its returned handle's cancel().
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/replica_link.h"

namespace crun {

struct ReplicaPeer {
  std::string address;
  std::uint16_t port = 0;
  std::string str() const;
  bool operator==(const ReplicaPeer&) const = default;
};

struct ReplicaClientOptions {
  std::string token;
  std::uint64_t max_set_bytes = 0;
  std::filesystem::path incoming_root;  // where fetched sets are written (job_root()/replicas)
};

class ReplicaPusher {
 public:
  ReplicaPusher(boost::asio::io_context& io, ReplicaClientOptions options,
                std::function<std::optional<OutgoingSet>(int rank)> snapshot);
  ~ReplicaPusher();
  ReplicaPusher(const ReplicaPusher&) = delete;
  ReplicaPusher& operator=(const ReplicaPusher&) = delete;

  void retarget(std::optional<ReplicaPeer> successor, std::vector<int> ranks);
  void changed(int rank);
  void on_acked(std::function<void(int rank, std::uint64_t sequence, std::uint64_t bytes)> f);
  bool busy() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct FetchedSet {
  int rank = 0;
  std::uint64_t sequence = 0;
  std::filesystem::path dir;  // its files, named as in the set; the caller moves or removes it
  std::vector<std::pair<std::string, std::uint64_t>> files;
  std::uint64_t bytes = 0;
  std::string from;           // the peer
};

class FetchHandle {
 public:
  virtual ~FetchHandle() = default;
  virtual void cancel() = 0;  // closes its connections; `done` does not run
};

std::shared_ptr<FetchHandle> fetch_replicas(boost::asio::io_context& io, std::vector<ReplicaPeer> peers,
                                            std::vector<int> ranks, ReplicaClientOptions options,
                                            std::chrono::milliseconds timeout,
                                            std::function<void(std::map<int, FetchedSet>, std::string error)> done);

}  // namespace crun
