// StateReplication: state that outlives a node. Each agent sends its ranks' committed state
// (agent/state_directory.h) to the next node of the ring, and a node given ranks it holds no
// state for fetches their newest replica before its workers start (docs/decisions.md, "State
// that outlives a node").
//
// Contract
//   - listen(addr): this node's endpoint (agent/replica_server.h) bound on `addr` at the first
//     call, port 0; returns its port, which the rendezvous announces in this node's record
//     (RendezvousNodeConfig::state_port). Later calls return the same port (a different address
//     is ignored). Peers' sets are kept under job_root()/replicas/.
//   - on_round(round, info, ready): the ring follows the round: node rank i sends to
//     (i + 1) % nodes (nobody alone, or when that node announced no endpoint); every one of this
//     node's ranks is sent to it once, then after each commit (StateDirectory::on_change; the
//     agent forwards it to changed()). Then, for each rank ranks_to_fetch names, it asks every
//     peer (and its own replicas) for the rank's newest set, installs what is newer than what it
//     holds (StateDirectory::install) and runs `ready`. The wait is bounded by `fetch_timeout`;
//     a fetch that fails or runs out says so in one line and `ready` runs without that state.
//     One line gives the time and the bytes fetched. `ready` runs once, on the loop, never from
//     inside on_round; cancel() drops it (the round ended before its start).
//   - ranks_to_fetch(round, previous, ranks): which of a round's `ranks` its start fetches: those
//     this node did not run in its previous round (`previous`), none in the job's first round. A
//     rank it did run keeps what it committed here, even nothing: no peer holds a newer set of
//     it, and asking every peer at each restart would cost O(nodes²) connections a restart.
//   - changed(rank): the rank's committed set changed (StateDirectory::on_change): opened now,
//     kept as this node's newest set of the rank (what the ring sends and peers fetch).
//
// Threading
//   Called on the agent's loop, but for listen(), which any thread may call (etcd-v3's I/O thread
//   does). The connections, the replicas and the copies run on a thread of the replication's own
//   (its own io_context; named crun-replica) at nice 19: on a host whose CPUs the workers keep busy, copying takes
//   what they leave (docs/decisions.md, "State that outlives a node"). StateDirectory is touched
//   on the loop only: each change's set is opened there and handed over; a fetch's sets come
//   back to the loop to be installed. close() (or the destructor) stops that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/replica_link.h"

#include "rendezvous/rendezvous_backend.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class StateDirectory;

std::vector<int> ranks_to_fetch(int round, const std::set<int>& previous, const std::vector<int>& ranks);

struct StateReplicationOptions {
  std::string token;               // the rendezvous' store token ("" = none)
  std::chrono::milliseconds fetch_timeout{60000};
};

// What the last fetch brought (for the operators' view and tests).
struct FetchSummary {
  int ranks = 0;
  std::uint64_t bytes = 0;
  std::chrono::milliseconds took{0};
  std::string error;
};

class StateReplication {
 public:
  StateReplication(boost::asio::io_context& io, StateDirectory& state, int nproc, StateReplicationOptions options);
  ~StateReplication();
  StateReplication(const StateReplication&) = delete;
  StateReplication& operator=(const StateReplication&) = delete;

  std::uint16_t listen(const std::string& addr);
  void on_round(int rendezvous_round, const RoundInfo& info, std::function<void(const FetchSummary&)> ready);
  void changed(int rank);
  void cancel();
  // Closes every connection and the endpoint; nothing runs after it (before the state goes).
  void close();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The rank's committed set now, its files opened (what the ring and --state-persist-dir copy);
// nothing when the rank never committed.
std::optional<OutgoingSet> committed_snapshot(const StateDirectory& state, int rank);

// "addr:port" or "[v6]:port" -> address and port; false when it is neither.
bool parse_state_endpoint(const std::string& text, std::string& address, std::uint16_t& port);

}  // namespace crun
