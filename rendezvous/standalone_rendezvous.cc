#include "rendezvous/standalone_rendezvous.h"

#include <stdexcept>
#include <utility>

#include "base/addresses.h"
#include "base/exit_codes.h"

namespace crun {

StandaloneRendezvous::StandaloneRendezvous(int nproc, std::string master_addr, std::optional<std::uint16_t> master_port,
                                           PostToLoop post, RendezvousListener listener)
    : nproc_(nproc),
      master_addr_(std::move(master_addr)),
      master_port_(master_port),
      post_(std::move(post)),
      listener_(std::move(listener)) {}

void StandaloneRendezvous::request_round() {
  RoundResult r;
  r.rendezvous_round = rounds_++;
  r.info.restart_count = r.rendezvous_round;
  r.info.group_rank = 0;
  r.info.group_world_size = 1;
  r.info.rank_offset = 0;
  r.info.world_size = nproc_;
  r.info.master_addr = master_addr_;
  try {
    r.info.master_port = master_port_ ? *master_port_ : pick_free_port(master_addr_);
  } catch (const std::exception& e) {
    r.error = std::string("cannot start workers: ") + e.what();
    r.exit_code = kExitAgentError;
  }
  post_([on_round = listener_.on_round, stopped = stopped_, r] {
    if (!*stopped) on_round(r);
  });
}

}  // namespace crun
