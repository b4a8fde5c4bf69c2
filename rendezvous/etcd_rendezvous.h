// EtcdRendezvous: the multi-node Rendezvous over an etcd v3 cluster (docs/rendezvous.md,
// "etcd-v3"): no agent hosts anything, so losing any node, the first one included, leaves the
// others able to go on.
//
// Contract
//   - At construction it starts its I/O thread, takes an etcd lease (kept alive every third of
//     lease_ttl, granted for lease_ttl more than that: an agent stalled for less than lease_ttl
//     keeps it) and puts this node's alive key under it; then it reads the run's keys and
//     watches them. The decisions are EtcdRoundCore's (etcd_round_core.h); this class feeds it
//     the keys and carries out its writes.
//   - request_round() answers through the listener's on_round: a round, or an error with crun's
//     exit code (join timeout 4, closed 5, rejected 6: a configuration unlike the others', or
//     etcd refusing this client's TLS or credentials; 7: etcd unreachable).
//   - Control events, progress lines and the loss of etcd (no member answered within the lease's
//     TTL, or the lease expired: this node's keys are gone) come through the listener.
//   - Stacks before the kill (Rendezvous::publish_stacks): each record under a lease of its own
//     (keep_for + close_timeout), so that it outlives this node. await_stacks() of one round share
//     one watch of that round's stacks keys and one read of them; a request for another round
//     answers those still waiting with nothing. A failing read or watch answers them with nothing:
//     never a loss of etcd.
//   - shutdown() revokes the lease (this node's keys go at once; bounded by 2 s) and stops the
//     thread; no callback runs after it.
//
// Threading
//   As Rendezvous (rendezvous_backend.h): constructed, used and destroyed on the agent's
//   event-loop thread; every listener callback is posted there. Everything etcd happens on the
//   backend's own I/O thread (one io_context), so a busy agent loop never delays a keep-alive.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/multi_node_config.h"
#include "rendezvous/rendezvous_backend.h"

namespace crun {

class EtcdRendezvous final : public Rendezvous {
 public:
  EtcdRendezvous(RendezvousNodeConfig config, PostToLoop post, RendezvousListener listener);
  ~EtcdRendezvous() override;
  EtcdRendezvous(const EtcdRendezvous&) = delete;
  EtcdRendezvous& operator=(const EtcdRendezvous&) = delete;

  void request_round() override;
  void publish_failure(int rendezvous_round, const RoundOutcome& failure) override;
  void publish_success(int rendezvous_round) override;
  void shutdown(std::chrono::milliseconds linger) override;
  std::string node_id() const override;
  std::string node_address() const override;
  void publish_status(std::string status_json, bool gather) override;
  std::vector<std::string> job_status() const override;
  bool keeps_stacks() const override { return true; }
  void publish_stacks(int rendezvous_round, int node_rank, std::string record, std::chrono::milliseconds keep_for,
                      std::function<void(bool)> done) override;
  void await_stacks(int rendezvous_round, int node_rank, std::chrono::milliseconds wait,
                    std::function<void(std::optional<std::string>)> done) override;

  // The cluster's members, as "host:port, host:port".
  std::string endpoints() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crun
