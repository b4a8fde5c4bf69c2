// StandaloneRendezvous: the single-node rendezvous of `crun --standalone` (and --nnodes 1).
//
// Contract
//   - Embeds a StoreServer in the agent's io_context on 127.0.0.1 with an OS-assigned port, so
//     two standalone jobs on one machine never collide.
//   - next_round(): group rank 0 of 1 node, world size = nproc, MASTER_ADDR as configured and a
//     MASTER_PORT that is free right now (bound to port 0 on MASTER_ADDR, read, closed), unless the
//     user fixed one.
//
// Threading
//   Constructed, used and destroyed on the agent's event-loop thread; the io_context must outlive it.
#pragma once

#include <memory>
#include <optional>

#include "agent/rendezvous.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class StoreServer;

class StandaloneRendezvous final : public Rendezvous {
 public:
  StandaloneRendezvous(boost::asio::io_context& io, int nproc, std::string master_addr,
                       std::optional<std::uint16_t> master_port);
  ~StandaloneRendezvous() override;

  RoundInfo next_round(int restart_count) override;
  void shutdown() override;

 private:
  int nproc_;
  std::string master_addr_;
  std::optional<std::uint16_t> master_port_;
  std::unique_ptr<StoreServer> store_;
};

// A TCP port on `addr` that nobody listens on right now (bind port 0, read it, close).
// Throws std::system_error when no socket can be bound.
std::uint16_t pick_free_port(const std::string& addr);

}  // namespace crun
