// StandaloneRendezvous: the single-node rendezvous of `crun --standalone` (and --nnodes 1).
//
// Contract
//   - next_round(): group rank 0 of 1 node, world size = nproc, MASTER_ADDR as configured and a
//     MASTER_PORT that is free right now (bound to port 0 on MASTER_ADDR, read, closed), unless the
//     user fixed one.
//
// Threading
//   Constructed, used and destroyed on the agent's event-loop thread.
#pragma once

#include <optional>
#include <string>

#include "agent/rendezvous.h"

namespace crun {

class StandaloneRendezvous final : public Rendezvous {
 public:
  StandaloneRendezvous(int nproc, std::string master_addr, std::optional<std::uint16_t> master_port);

  RoundInfo next_round(int restart_count) override;
  void shutdown() override;

 private:
  int nproc_;
  std::string master_addr_;
  std::optional<std::uint16_t> master_port_;
};

}  // namespace crun
