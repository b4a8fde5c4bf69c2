// JobEnvironment: launch defaults a scheduler or platform put in the environment.
//
// Contract
//   detect_job_environment(env) reads the given environment and returns, per launch setting
//   (nnodes, nproc_per_node, rdzv_backend, rdzv_endpoint, rdzv_id, node_rank, master_addr,
//   master_port), a value and the variable(s) it came from. These rank below flags and PET_*
//   variables and above the built-in defaults; launcher/setting_sources.h applies that order.
//     - Slurm (SLURM_JOB_ID set). Inside an srun step: nnodes = SLURM_STEP_NUM_NODES (or
//       SLURM_NNODES); rendezvous c10d at the first host of SLURM_STEP_NODELIST (or
//       SLURM_NODELIST, SLURM_JOB_NODELIST), port slurm_port(job, step); node_rank = SLURM_NODEID
//       (node 0 then hosts the store: launcher/multi_node_options.h); rdzv_id = JOBID.STEPID;
//       nproc_per_node = SLURM_GPUS_ON_NODE when > 0. A step with more tasks than nodes is an error (one crun per
//       node, or --slurm-tasks). In the batch script itself (no step) crun runs on this node only.
//     - Platform (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE all set, as PyTorchJob and similar
//       platforms hand each node): a static job of WORLD_SIZE nodes, this one RANK, the store at
//       MASTER_ADDR:MASTER_PORT. Ignored inside a torchrun/crun worker (TORCHELASTIC_RUN_ID set),
//       and when SLURM_JOB_ID is set (Slurm's own variables describe the job).
//   A malformed variable throws std::invalid_argument naming it.
//
//   slurm_node_address(name, host) returns an address other nodes can reach `name` at: the name
//   itself when host.resolve finds it (DNS, /etc/hosts), otherwise the NodeAddr
//   host.slurm_node_addr reports (node names need not resolve; Slurm reaches them by NodeAddr);
//   throws std::runtime_error if neither.
//
// Threading
//   Pure functions of their arguments (slurm_node_address blocks in host's lookups).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>

#include "launcher/launch_inputs.h"
#include "launcher/launch_setting.h"

namespace crun {

struct JobEnvironment {
  std::string kind;                              // "", "slurm" or "platform"
  std::map<std::string, Sourced<std::string>> defaults;  // by setting name (torchrun's, with '_')
  std::string first_node;                        // Slurm: the host the rendezvous endpoint names
  std::string note;                              // a line to show at launch ("" = none)
};

JobEnvironment detect_job_environment(const EnvSnapshot& env);

std::string slurm_node_address(const std::string& name, const HostFacts& host);

// The port a Slurm job step uses for its rendezvous (agents) or MASTER_PORT (--slurm-tasks):
// in [20000, 30000), below Linux's ephemeral range, the same on every node of the step.
std::uint16_t slurm_port(unsigned long long job_id, unsigned long long step_id);

// The first of `names` that is set in `env`: (name, value).
std::optional<std::pair<const char*, std::string>> first_set(const EnvSnapshot& env,
                                                             std::initializer_list<const char*> names);
// `text` (the value of variable `name`) as a non-negative integer; std::invalid_argument naming
// the variable otherwise.
unsigned long long env_number(const char* name, const std::string& text);

}  // namespace crun
