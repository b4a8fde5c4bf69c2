// RendezvousCoordinator: decides rounds for one run; lives in the agent that hosts the store.
// The decisions are CoordinatorCore's (coordinator_core.h); this class feeds it the run's store
// events and applies its effects to the store.
//
// Contract
//   - Watches the run's keys and answers joins: once min_nodes have joined, the round closes after
//     last_call_timeout, at once when max_nodes have joined, and at once when every node of the
//     previous round has rejoined (a restart does not wait out the last call). Node ranks are
//     ordered by rank hint, then previous rank, then node id, so they are stable across rounds.
//   - A node whose configuration differs from the reference (the hosting agent's own record, else
//     the first node's to join) is answered with an error naming both nodes and every differing
//     field.
//   - While a round runs: a failure report ends it (restart_count + 1 while restarts remain, else
//     the job closes with the failure's exit code); a node that joins while there is room, or a
//     participant that is lost (its connection closed, or no heartbeat for heartbeat_timeout
//     after its next one was due), ends it without counting a restart; all participants
//     reporting success close the job. Time its own thread or process was stalled counts as no
//     node's silence; a stall past every agent's wait for a heartbeat's reply closes the job
//     with kExitStoreLost (coordinator_core.h).
//   - Every decision is one key write that agents watch (ctl/stop/<round>, ctl/closed), so
//     messages per round are O(nodes). It watches only what it reads (join/, alive/, hb/,
//     report/), on one connection. While a round forms, a progress line at most once a second
//     goes to on_progress (the hosting agent prints it; no other agent is told).
//   - It deletes the keys no agent can still need (docs/rendezvous.md, "Pruning": answers a node
//     has read, a lost node's records, stop keys, reports and round/<r>/ of rounds older than
//     the previous one), in one pipelined batch per batch of events: the store holds O(nodes)
//     keys however many rounds the job goes through.
//
// Threading
//   Runs on a thread of its own, started by the constructor and joined by the destructor; its
//   watches' connection has its I/O thread. Its store connections are its own.
//   wait_until_drained() may be called from any one thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/rendezvous_records.h"
#include "store/store_client.h"

namespace crun {

class RendezvousCoordinator {
 public:
  // `reference`: the hosting agent's own record; every node's configuration must match it (when
  // absent, the first node to join sets it). `on_failed` runs once, on the coordinator's thread,
  // if the coordinator cannot go on (its store connection broke): the host should end the job.
  // `on_progress` runs on the coordinator's thread too.
  RendezvousCoordinator(StoreEndpoint store, StoreClientOptions options, RendezvousConfig config,
                        std::function<void(const std::string&)> log, std::optional<NodeRecord> reference = std::nullopt,
                        std::function<void(const std::string&)> on_failed = {},
                        std::function<void(const std::string&)> on_progress = {});
  ~RendezvousCoordinator();
  RendezvousCoordinator(const RendezvousCoordinator&) = delete;
  RendezvousCoordinator& operator=(const RendezvousCoordinator&) = delete;

  // Waits until the job is closed and no participant is connected any more, or `bound` passes.
  // Returns true when drained; returns false at once when the job has not closed.
  bool wait_until_drained(Millis bound);
  // Waits until no participant is connected any more (whether or not the job closed), or `bound`
  // passes; true when none is. A preempted host uses it so that the others can finish.
  bool wait_until_alone(Millis bound);
  bool closed() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
