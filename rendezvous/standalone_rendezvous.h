// StandaloneRendezvous: the single-node rendezvous of `crun --standalone` (and --nnodes 1).
//
// Contract
//   - request_round(): posts on_round with group rank 0 of 1 node, world size = nproc, MASTER_ADDR
//     as configured and a MASTER_PORT that is free right now (bound to port 0 on MASTER_ADDR, read,
//     closed), unless the user fixed one; when no port can be had, an error with crun's exit code 3. Every round after the first is a restart (one node: no
//     membership changes), so round n has restart count n.
//   - No control events, progress or store; publishing an outcome does nothing; after shutdown()
//     an answer still queued is dropped.
//
// Threading
//   As Rendezvous (rendezvous_backend.h): the agent's event-loop thread; on_round is posted.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_backend.h"

namespace crun {

class StandaloneRendezvous final : public Rendezvous {
 public:
  StandaloneRendezvous(int nproc, std::string master_addr, std::optional<std::uint16_t> master_port, PostToLoop post,
                       RendezvousListener listener);

  void request_round() override;
  void publish_failure(int, const RoundOutcome&) override {}
  void publish_success(int) override {}
  void shutdown(std::chrono::milliseconds) override { *stopped_ = true; }
  std::string node_id() const override { return {}; }
  std::string node_address() const override { return {}; }
  // One node: nobody to share a status with.
  void publish_status(std::string, bool) override {}
  std::vector<std::string> job_status() const override { return {}; }

 private:
  int nproc_;
  std::string master_addr_;
  std::optional<std::uint16_t> master_port_;
  PostToLoop post_;
  RendezvousListener listener_;
  int rounds_ = 0;  // rounds answered so far
  std::shared_ptr<bool> stopped_ = std::make_shared<bool>(false);  // read by answers still queued
};

}  // namespace crun
