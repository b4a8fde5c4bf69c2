#include "rendezvous/multi_node_config.h"

#include "rendezvous/rendezvous_participant.h"

namespace crun {

NodeRecord this_node_record(const RendezvousNodeConfig& config) {
  NodeRecord self;
  self.hostname = config.hostname;
  self.node_id = make_node_id(config.hostname);
  self.addr = config.multi.local_addr;
  self.rank_hint = config.multi.rank_hint;
  self.nproc = config.nproc_per_node;
  self.role = config.role;
  self.max_restarts = config.max_restarts;
  self.min_nodes = config.multi.rendezvous.min_nodes;
  self.max_nodes = config.multi.rendezvous.max_nodes;
  self.program = config.multi.program;
  self.exclude_after = config.multi.rendezvous.exclude_after;
  self.exclude_cooldown_ms = config.multi.rendezvous.exclude_cooldown.count();
  return self;
}

}  // namespace crun
