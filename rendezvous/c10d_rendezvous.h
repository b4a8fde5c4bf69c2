// C10dRendezvous: the multi-node Rendezvous over crun's store (docs/rendezvous.md).
//
// Contract
//   - The agent whose config says is_host (the launcher decides who hosts) starts the store on the
//     endpoint's port at bind_address (its own thread) and the RendezvousCoordinator; every agent,
//     host included, takes part through a RendezvousParticipant. When is_host was only inferred
//     (join_if_taken), a connection attempt to that address says whether another agent on this
//     host listened first: then this one joins it as a client (is_host() false), over that
//     connection; else it hosts, unless its bind finds the port taken after all: then it joins
//     the agent that won, once that one listens (up to 3 s), and the constructor throws
//     StoreError naming the port when nothing comes to listen there (another program's socket).
//   - request_round() returns at once: the participant (on the agent's loop; connecting the
//     first time) asks for the next round; the answer (a RoundInfo, or an error with crun's
//     exit code for it) is delivered through the listener's on_round.
//     With multi.workers_use_agent_store the RoundInfo's master address and port are the store's
//     endpoint (agent_store set: the workers share this store); otherwise node rank 0's address
//     and a port it found free (or master_port) for rank 0 to host the workers' own store.
//   - Control events (the coordinator ended the round, or closed the job) and the loss of the
//     store are delivered through the listener; the round's progress lines only on the store's
//     host (the others print their rank once their round formed: agent.cc).
//   - publish_failure()/publish_success() report this node's outcome of the current round.
//   - shutdown(linger): stops joining, leaves the rendezvous; on the host, keeps the store up until
//     every other agent has left: after the job closed (bounded by close_timeout), or for `linger`
//     when it leaves unclosed (a preempted job, whose other nodes are still checkpointing).
//
// Threading
//   As Rendezvous (rendezvous_backend.h): constructed, used and destroyed on the agent's
//   event-loop thread; every listener callback is posted there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/multi_node_config.h"
#include "rendezvous/rendezvous_backend.h"
#include "rendezvous/rendezvous_records.h"
#include "store/store_client.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class C10dRendezvous final : public Rendezvous {
 public:
  // `loop` is the agent's, the one `post` runs on: the participant's connection runs there.
  C10dRendezvous(RendezvousNodeConfig config, PostToLoop post, RendezvousListener listener,
                 boost::asio::io_context& loop);
  ~C10dRendezvous() override;
  C10dRendezvous(const C10dRendezvous&) = delete;
  C10dRendezvous& operator=(const C10dRendezvous&) = delete;

  void request_round() override;
  void publish_failure(int rendezvous_round, const RoundOutcome& failure) override;
  void publish_success(int rendezvous_round) override;
  void shutdown(std::chrono::milliseconds linger) override;
  // This agent's node id (valid once the first round was requested and connected).
  std::string node_id() const override;
  // The address the other nodes reach this node at (--local-addr, else the local address of the
  // store connection); "" until connected.
  std::string node_address() const override;
  void publish_status(std::string status_json, bool gather) override;
  std::vector<std::string> job_status() const override;
  // Through the participant's connection (rendezvous/rendezvous_participant.h); without one (no
  // round joined yet) or once shut down, `done` is posted at once: not taken, nothing came.
  bool keeps_stacks() const override { return true; }
  void publish_stacks(int rendezvous_round, int node_rank, std::string record, std::chrono::milliseconds keep_for,
                      std::function<void(bool)> done) override;
  void await_stacks(int rendezvous_round, int node_rank, std::chrono::milliseconds wait,
                    std::function<void(std::optional<std::string>)> done) override;

  bool is_host() const;
  std::string store_endpoint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crun
