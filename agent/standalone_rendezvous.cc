#include "agent/standalone_rendezvous.h"

#include <utility>

#include "base/addresses.h"

namespace crun {

StandaloneRendezvous::StandaloneRendezvous(int nproc, std::string master_addr,
                                           std::optional<std::uint16_t> master_port)
    : nproc_(nproc), master_addr_(std::move(master_addr)), master_port_(master_port) {}

RoundInfo StandaloneRendezvous::next_round(int restart_count) {
  RoundInfo r;
  r.restart_count = restart_count;
  r.group_rank = 0;
  r.group_world_size = 1;
  r.rank_offset = 0;
  r.world_size = nproc_;
  r.master_addr = master_addr_;
  r.master_port = master_port_ ? *master_port_ : pick_free_port(master_addr_);
  return r;
}

void StandaloneRendezvous::shutdown() {}

}  // namespace crun
