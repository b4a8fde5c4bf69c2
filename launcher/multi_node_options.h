// make_multi_node: turns the rendezvous flags into the agent's MultiNodeConfig.
//
// Contract
//   - Returns nullopt for a single-node run (--standalone, or one node without a c10d endpoint).
//   - c10d: --rdzv-endpoint HOST[:PORT] (port 29400 by default) is required; --nnodes MIN:MAX.
//   - static (torch.distributed.launch style): --nnodes N, --node-rank R in [0, N), the store at
//     --master-addr:--master-port (29500 by default), hosted by node rank 0. Workers get a fresh
//     MASTER_PORT chosen by node rank 0's agent, since the store holds --master-port.
//   - --rdzv-conf KEY=VALUE,...: join_timeout, last_call_timeout, close_timeout,
//     heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, read_timeout, timeout (an
//     alias of join_timeout), is_host, token, use_libuv (accepted, ignored). Durations in seconds.
//     The token defaults to $CRUN_RDZV_TOKEN.
//   - Any bad value or unknown key throws LaunchUsageError naming it.
//
// Threading
//   Pure function of its arguments and the environment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"

namespace crun {

struct RendezvousFlags {
  bool standalone = false;
  long min_nodes = 1;
  long max_nodes = 1;
  std::string backend = "static";
  std::string endpoint;
  std::string run_id = "none";
  std::string conf;
  std::optional<int> node_rank;     // given explicitly
  std::string master_addr;
  std::optional<int> master_port;   // given explicitly
  std::string local_addr;
  std::optional<bool> is_host;      // Slurm: node 0 hosts the store (rdzv_conf is_host wins)
  std::vector<std::string> program;  // as the user wrote it
};

std::optional<MultiNodeConfig> make_multi_node(const RendezvousFlags& f, int max_restarts);

}  // namespace crun
