// C10dRendezvous: the agent's side of a multi-node run (docs/rendezvous.md).
//
// Contract
//   - The agent whose MultiNodeConfig::is_host is set (the launcher decides) starts the store on
//     the endpoint's port at bind_address (its own thread) and the RendezvousCoordinator; every
//     agent, host included, takes part through a RendezvousParticipant.
//   - request_round() joins the next round on a background thread; the answer (a RoundInfo, or an
//     error with crun's exit code for it) is delivered through Listener::on_round.
//   - Control events (the coordinator ended the round, or closed the job), progress lines and the
//     loss of the store are delivered through the Listener.
//   - publish_failure()/publish_success() report this node's outcome of the current round.
//   - shutdown(): stops joining, leaves the rendezvous; on the host, keeps the store up until every
//     other agent has left (bounded by close_timeout) when the job closed normally.
//
// Threading
//   Constructed, used and destroyed on the agent's event-loop thread. Every Listener callback is
//   posted to that io_context, so it runs there too.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "agent/agent_config.h"
#include "agent/rendezvous.h"

namespace boost::asio {
class io_context;
}

namespace crun {

struct ControlEvent;

struct RoundResult {
  RoundInfo info;
  int rendezvous_round = -1;
  std::string error;  // non-empty: no round; exit with `exit_code`
  int exit_code = 0;
};

class C10dRendezvous {
 public:
  struct Listener {
    std::function<void(const RoundResult&)> on_round;
    std::function<void(const ControlEvent&)> on_control;
    std::function<void(const std::string&)> on_progress;
    std::function<void(const std::string&)> on_store_lost;
  };

  C10dRendezvous(boost::asio::io_context& io, const AgentConfig& config, Listener listener);
  ~C10dRendezvous();
  C10dRendezvous(const C10dRendezvous&) = delete;
  C10dRendezvous& operator=(const C10dRendezvous&) = delete;

  void request_round();
  void publish_failure(int rendezvous_round, int exit_code, std::int64_t wall_time_us, const std::string& report);
  void publish_success(int rendezvous_round);
  // Leaves the rendezvous. The host keeps the store up until the others have left: after the job
  // closed (bounded by close_timeout), or for `linger` when it leaves unclosed (a preempted job,
  // whose other nodes are still checkpointing).
  void shutdown(std::chrono::milliseconds linger = std::chrono::milliseconds(0));

  bool is_host() const;
  // This agent's node id (valid once the first round was requested and connected).
  std::string node_id() const;
  // The address the other nodes reach this node at (--local-addr, else the local address of the
  // store connection); "" until connected.
  std::string node_address() const;
  std::string store_endpoint() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crun
