// Rendezvous: the agent's seam to "who is in this round and where is rank 0".
//
// Contract
//   next_round() is called before each (re)start of the worker group and returns this node's
//   place in the world for that round. The single-node implementation answers at once; the
//   multi-node run does not use this seam: it is event-driven (C10dRendezvous, c10d_rendezvous.h).
//   shutdown() marks the job finished (no more rounds).
//
// Threading
//   Called on the agent's event-loop thread only.
#pragma once

#include <cstdint>
#include <string>

namespace crun {

struct RoundInfo {
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT of the group started for this round
  int group_rank = 0;         // this node's rank (GROUP_RANK)
  int group_world_size = 1;   // number of nodes
  int rank_offset = 0;        // global rank of this node's local rank 0
  int world_size = 1;         // total workers
  std::string master_addr;
  std::uint16_t master_port = 0;
};

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual RoundInfo next_round(int restart_count) = 0;
  virtual void shutdown() = 0;
};

}  // namespace crun
