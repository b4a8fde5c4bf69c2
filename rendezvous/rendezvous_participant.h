// RendezvousParticipant: one agent's side of the c10d-style rendezvous.
//
// Contract
//   - The constructor returns at once. The participant's one connection (store/store_channel.h)
//     runs on the owner's event loop: given a connection already made (StoreConnection::
//     connect_once: an agent that found the store listening on its own host) it uses that one,
//     else it connects, retrying until join_timeout. Once connected it watches the coordinator's
//     control keys and writes this node's first heartbeat, then one every keep_alive_interval.
//   - join(free_port, done) announces this node as alive (an ephemeral key: gone the moment this
//     process or its connection dies), publishes its record and asks for the coordinator's
//     answer, all in one write. `free_port(addr)` runs once this node's address is known (at
//     once, or when it connects; an empty `self.addr` becomes the local address
//     of the store connection): a port free on this node now (MASTER_PORT if it becomes rank 0).
//     `done` runs once: a round (rank, node count, master address, restart
//     count), an error answer (configuration mismatch, rendezvous closed), or `error`:
//     RendezvousTimeout after join_timeout, or the StoreError that stopped it, with
//     `reached_store` false when the store could not be reached at all. One join at a time: the
//     next once `done` ran.
//   - report() publishes this node's outcome of a round and returns at once; a store that does
//     not take it within the requests' timeout is lost (on_store_lost, "cannot publish ...").
//   - publish_status() writes this node's status for operators (agent/node_status.h's JSON) as
//     an ephemeral key (gone with this agent). With `gather` (node rank 0) every node's status is
//     read back at each heartbeat and after each status of its own; job_status() returns the
//     newest it read.
//   - publish_stacks() writes a record (not ephemeral: it outlives this agent) at
//     RendezvousKeys::stacks(round, node_rank); `done(taken)` once the store answered or the
//     request's deadline passed. await_stacks() gets that key, parked at the store up to `wait`;
//     `done(nullopt)` when it did not come (or the request failed). Neither is the store lost.
//   - Events arrive through ParticipantEvents callbacks: a control event (stop a round, or the
//     job closed), and the loss of the store (the connection broke after it was made, or a
//     heartbeat or status was not answered within heartbeat_timeout). Do not block in them.
//
// Threading
//   Every call, the destructor and every callback on the loop's thread. No callback runs once
//   the destructor began; it must not run inside a callback.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_records.h"
#include "store/store_client.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class StoreConnection;

class RendezvousTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParticipantEvents {
  std::function<void(const ControlEvent&)> on_control;
  std::function<void(const std::string&)> on_store_lost;
};

// What a join came to.
struct JoinResult {
  std::optional<RoundAnswer> answer;  // the coordinator's answer; absent: `error`
  std::exception_ptr error;           // RendezvousTimeout or StoreError
  bool reached_store = true;          // false: no connection to the store could be made
  std::string address;                // this node's address as published
};

class RendezvousParticipant {
 public:
  // `self` carries the node's identity and configuration; its addr may be empty, in which case the
  // local address of the store connection is used (the interface that reaches the store).
  // `connected` may be null: the participant then connects to `store` itself.
  RendezvousParticipant(boost::asio::io_context& loop, std::unique_ptr<StoreConnection> connected, StoreEndpoint store,
                        StoreClientOptions options, RendezvousConfig config, NodeRecord self, ParticipantEvents events);
  ~RendezvousParticipant();
  RendezvousParticipant(const RendezvousParticipant&) = delete;
  RendezvousParticipant& operator=(const RendezvousParticipant&) = delete;

  void join(std::function<std::uint16_t(const std::string& addr)> free_port, std::function<void(JoinResult)> done);
  // Each join's record then carries state_port(addr) (NodeRecord::state_port), asked when the
  // address is known, as free_port is.
  void announce_state_port(std::function<std::uint16_t(const std::string& addr)> state_port);
  void report(int round, const RoundOutcome& outcome);
  void publish_status(std::string status_json, bool gather);
  std::vector<std::string> job_status() const;
  void publish_stacks(int round, int node_rank, std::string record, std::function<void(bool taken)> done);
  void await_stacks(int round, int node_rank, std::chrono::milliseconds wait,
                    std::function<void(std::optional<std::string>)> done);

  const std::string& node_id() const;
  const RendezvousKeys& keys() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A unique node id for this process: "<hostname>:<pid>:<8 hex digits>".
std::string make_node_id(const std::string& hostname);

}  // namespace crun
