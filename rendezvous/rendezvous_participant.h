// RendezvousParticipant: one agent's side of the c10d-style rendezvous.
//
// Contract
//   - The constructor connects to the store (retrying until join_timeout), watches the
//     coordinator's control keys, announces this node as alive (an ephemeral key: it disappears
//     the moment this process or its connection dies) and starts heartbeats every
//     keep_alive_interval. All of it on one connection (store/store_channel.h), whose reader
//     thread delivers the watch's events; a second thread sends the heartbeats.
//   - join() publishes this node's record and blocks until the coordinator answers: a round
//     (rank, node count, master address, restart count), or an error (configuration mismatch,
//     rendezvous closed). It throws RendezvousTimeout after join_timeout and StoreError when the
//     store is unreachable.
//   - report() publishes this node's outcome of a round (success, or the failure report).
//   - publish_status() hands over this node's status for operators (agent/node_status.h's JSON):
//     the heartbeat thread writes it as soon as it can, as an ephemeral key (gone with this
//     agent). With `gather` (node rank 0) that thread also reads every node's status back, at
//     each heartbeat and each new status of its own; job_status() returns the newest it read.
//   - Events arrive through ParticipantEvents callbacks: a control event (stop a round, or the job
//     closed), progress lines while a round forms, and the loss of the store (the watch
//     connection broke, or a heartbeat could not be delivered within heartbeat_timeout). Each
//     callback runs on an internal thread: post to your event loop, do not block.
//
// Threading
//   join() and report() may be called from any thread, one call at a time (under a mutex).
//   abort() from any thread: join() and report() fail at once then and from then on; heartbeats
//   and the watch go on. Destruction stops heartbeats and the watch; it must not happen on a
//   callback thread.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_records.h"
#include "store/store_client.h"

namespace crun {

class RendezvousTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParticipantEvents {
  std::function<void(const ControlEvent&)> on_control;
  std::function<void(const std::string&)> on_progress;
  std::function<void(const std::string&)> on_store_lost;
};

class RendezvousParticipant {
 public:
  // Connects (retrying until join_timeout, or until options.cancel is cancelled).
  // `self` carries the node's identity and configuration; its addr may be empty, in which case the
  // local address of the store connection is used (the interface that reaches the store).
  RendezvousParticipant(StoreEndpoint store, StoreClientOptions options, RendezvousConfig config, NodeRecord self,
                        ParticipantEvents events);
  ~RendezvousParticipant();
  RendezvousParticipant(const RendezvousParticipant&) = delete;
  RendezvousParticipant& operator=(const RendezvousParticipant&) = delete;

  // `free_port`: a port free on this node now (MASTER_PORT if this node becomes rank 0).
  RoundAnswer join(std::uint16_t free_port);
  void report(int round, const RoundOutcome& outcome);
  void publish_status(std::string status_json, bool gather);
  std::vector<std::string> job_status() const;
  // From another thread: a join() blocked on the coordinator's answer fails at once, and so does
  // every later join() or report().
  void abort();

  const NodeRecord& self() const;
  const RendezvousKeys& keys() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A unique node id for this process: "<hostname>:<pid>:<8 hex digits>".
std::string make_node_id(const std::string& hostname);

}  // namespace crun
