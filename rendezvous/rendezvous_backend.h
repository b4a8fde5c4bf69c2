// Rendezvous: the agent's one seam to "who is in this round, where is rank 0, and when does it end".
//
// Contract
//   Event-driven, the same for every backend: standalone (one node, no shared state),
//   c10d (crun's store, hosted by an agent or reached at --rdzv-endpoint; `static` is c10d with
//   the ranks given) and etcd-v3 (rendezvous/etcd_rendezvous.h):
//     - request_round() asks for this node's place in the next round; the answer (a RoundResult:
//       a RoundInfo, or an error with crun's exit code for it) comes through Listener::on_round,
//       never from inside request_round() itself.
//     - Multi-node backends also deliver the coordinator's control events (the round ended, or
//       the job closed: ControlEvent), progress lines and the loss of their store.
//     - publish_failure()/publish_success() report this node's outcome of a round; the backend's
//       coordinator alone decides restart or stop (single node: nobody listens).
//     - publish_status()/job_status() share each node's status for operators; best effort (a
//       backend that cannot deliver it drops it quietly: it is never worth stopping a job for).
//     - publish_stacks()/await_stacks(), where keeps_stacks() (c10d, etcd-v3): a node's stacks
//       before the kill for one round, on a key that outlives the node's status record, so that
//       node rank 0 gathers them when the job closes (agent/closing_stacks.h). Elsewhere (one
//       node) they are never called.
//     - shutdown(linger) leaves the rendezvous; no callback runs after it. A backend that hosts
//       shared state keeps it up for the others (multi-node: up to close_timeout once the job
//       closed, or `linger` when it leaves unclosed).
//   Backends must not include the agent or the launcher; they take a rendezvous-level config.
//
// Threading
//   Constructed, used and destroyed on the agent's event-loop thread. Every Listener callback is
//   handed to the PostToLoop given at construction, so it runs on that thread too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_records.h"

namespace crun {

struct ControlEvent;

// This node's place in one round.
struct RoundInfo {
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT of the group started for this round
  int group_rank = 0;         // this node's rank (GROUP_RANK)
  int group_world_size = 1;   // number of nodes
  int rank_offset = 0;        // global rank of this node's local rank 0
  int world_size = 1;         // total workers
  std::string master_addr;
  std::uint16_t master_port = 0;
  bool agent_store = false;   // MASTER_ADDR:MASTER_PORT is the agents' store (TORCHELASTIC_USE_AGENT_STORE)
  // By node rank: each node's state replication endpoint, "addr:port" ("" none; empty: no node
  // announced one). agent/state_replication.h's ring and fetch.
  std::vector<std::string> state_endpoints;
};

// The answer to request_round().
struct RoundResult {
  RoundInfo info;
  int rendezvous_round = -1;  // the round's number (counts membership changes too)
  std::string error;          // non-empty: no round; exit with `exit_code`, unless excluded_for > 0
  int exit_code = 0;
  // This node is excluded (docs/rendezvous.md, "Exclusion"): ask again once excluded_for passed.
  std::chrono::milliseconds excluded_for{0};
  std::string excluded_reason;
  // With a round: the nodes excluded now and the job's number of exclusions (for operators).
  std::vector<ExcludedNode> excluded;
  int exclusions_total = 0;
};

struct RendezvousListener {
  std::function<void(const RoundResult&)> on_round;
  std::function<void(const ControlEvent&)> on_control;
  std::function<void(const std::string&)> on_progress;
  std::function<void(const std::string&)> on_store_lost;
};

// Runs a callable on the agent's event loop, later (boost::asio::post, for the agent).
using PostToLoop = std::function<void(std::function<void()>)>;

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  virtual void request_round() = 0;
  virtual void publish_failure(int rendezvous_round, const RoundOutcome& failure) = 0;
  virtual void publish_success(int rendezvous_round) = 0;
  virtual void shutdown(std::chrono::milliseconds linger) = 0;

  // This node's id among the rendezvous' nodes, and the address the others reach it at; "" when
  // there are no others (or before the first round was requested and connected).
  virtual std::string node_id() const = 0;
  virtual std::string node_address() const = 0;

  // Operators' view (agent/operator_view.h): hands over this node's status (JSON) for the other
  // nodes; with `gather` (node rank 0) the backend also reads every node's back. job_status():
  // the newest records read (empty where nobody shares: one node, or before the first read).
  virtual void publish_status(std::string status_json, bool gather) = 0;
  virtual std::vector<std::string> job_status() const = 0;

  // Stacks before the kill that outlive the node (agent/closing_stacks.h): `record` for round
  // `rendezvous_round` and node rank `node_rank`, kept at least `keep_for` after it was taken
  // (c10d: until the round is pruned; etcd-v3: under a lease of its own that long, plus
  // close_timeout); `done(taken)` once the store took it or failed. await_stacks: that record,
  // waiting for it up to `wait`; `done(nullopt)` when it did not come. Callbacks on the loop,
  // never inside the call; none after shutdown(). Backends without such keys (keeps_stacks()
  // false) never call `done`: the agent does not ask them.
  virtual bool keeps_stacks() const { return false; }
  virtual void publish_stacks(int /*rendezvous_round*/, int /*node_rank*/, std::string /*record*/,
                              std::chrono::milliseconds /*keep_for*/, std::function<void(bool taken)> /*done*/) {}
  virtual void await_stacks(int /*rendezvous_round*/, int /*node_rank*/, std::chrono::milliseconds /*wait*/,
                            std::function<void(std::optional<std::string>)> /*done*/) {}
};

}  // namespace crun
