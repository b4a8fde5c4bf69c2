// make_multi_node: the rendezvous group of a launch plan -> the agent's MultiNodeConfig, with the
// decision of who hosts the store.
//
// Contract
//   - Returns nullopt for a single-node run (--standalone, or one node without a c10d endpoint).
//   - c10d: --rdzv-endpoint HOST[:PORT] (port 29400 by default) is required; --nnodes MIN:MAX.
//   - static (torch.distributed.launch style): --nnodes N, --node-rank R in [0, N), the store at
//     --master-addr:--master-port (29500 by default).
//   - The workers' store (workers_use_agent_store): c10d and static share the agents' store with
//     the workers, as torchrun's agent store (MASTER_ADDR:MASTER_PORT = the store,
//     TORCHELASTIC_USE_AGENT_STORE=True), unless a token guards it (torch's clients cannot present
//     one) or TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torch 2.x's opt-out); then node rank 0's agent
//     picks a fresh MASTER_PORT (or --master-port with c10d) and rank 0 hosts the workers' store.
//   - --rdzv-conf KEY=VALUE pairs (already split): join_timeout, last_call_timeout, close_timeout,
//     heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt, read_timeout, timeout (an
//     alias of join_timeout), is_host, token, use_libuv (accepted, ignored). Durations in seconds.
//     The token defaults to `token` ($CRUN_RDZV_TOKEN).
//   - Who hosts the store, decided here once: is_host from --rdzv-conf, else the job
//     environment's (Slurm: node 0), else node rank 0 (static), else whether the endpoint's host
//     is one of host.addresses (an IP literal itself, a name through host.resolve). bind_address
//     is the local address the endpoint stands for ("" when none). host_source says which rule
//     decided, endpoint_source where the endpoint came from.
//   - Any bad value or unknown key throws LaunchUsageError naming it.
//
// Threading
//   Pure function of its arguments (blocks in host.resolve).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_config.h"
#include "launcher/launch_inputs.h"
#include "launcher/launch_setting.h"

namespace crun {

enum class RendezvousBackend { kStatic, kC10d, kEtcdV3 };

struct RendezvousFlags {
  bool standalone = false;
  long min_nodes = 1;
  long max_nodes = 1;
  RendezvousBackend backend = RendezvousBackend::kStatic;
  // --rdzv-backend static asked for by the user (flag or PET_*): a one-node job then hosts the
  // agents' store at master_addr:master_port (127.0.0.1:29500 unless given), as torchrun's static
  // rendezvous does at any node count; without it a one-node job has no agents' store.
  bool static_asked = false;
  std::string endpoint;                                    // HOST[:PORT] text (c10d), HOST[:PORT],... (etcd-v3)
  std::string endpoint_source;
  std::string run_id = "none";
  std::vector<std::pair<std::string, std::string>> conf;  // --rdzv-conf
  std::optional<int> node_rank;                            // given explicitly
  std::string master_addr;
  std::optional<int> master_port;                          // given explicitly
  std::string local_addr;
  std::optional<Sourced<bool>> is_host;                    // the job environment's (Slurm: node 0)
  std::string token;                                       // $CRUN_RDZV_TOKEN
  bool share_store = true;                                 // TORCH_DISABLE_SHARE_RDZV_TCP_STORE != 1
  std::vector<std::string> program;                        // as the user wrote it
  int exclude_after = 2;                                   // --exclude-after (0: never)
  std::chrono::milliseconds exclude_cooldown{600000};      // --exclude-cooldown
};

struct MultiNodePlan {
  MultiNodeConfig config;
  std::string endpoint_source;
  std::string host_source;
};

std::optional<MultiNodePlan> make_multi_node(const RendezvousFlags& f, int max_restarts, const HostFacts& host);

}  // namespace crun
