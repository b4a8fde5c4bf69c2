// --slurm-tasks: one Slurm task per worker, no agent (`srun -n 8 crun --slurm-tasks prog`).
//
// Contract
//   slurm_task_environment() derives, from the task's SLURM_* variables in `env`, the worker environment
//   torchrun would give the same process: RANK = SLURM_PROCID, LOCAL_RANK = SLURM_LOCALID,
//   WORLD_SIZE = SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), LOCAL_WORLD_SIZE = this node's entry of
//   SLURM_STEP_TASKS_PER_NODE, GROUP_RANK = SLURM_NODEID, GROUP_WORLD_SIZE = the step's nodes,
//   ROLE_*, MASTER_ADDR = the step's first node (slurm_node_address with `host`'s lookups),
//   MASTER_PORT = slurm_port(job, step), TORCHELASTIC_RUN_ID = JOB.STEP,
//   TORCHELASTIC_RESTART_COUNT = SLURM_RESTART_COUNT (0 when unset), TORCHELASTIC_MAX_RESTARTS = 0,
//   and the rest of the contract as the agent sets it (agent/worker_env.h builds both: NCCL error
//   handling, OMP_NUM_THREADS as torchrun; TORCHELASTIC_ERROR_FILE only when `env` has one, as no
//   agent remains to read it). master_addr / master_port, when given
//   (flag or PET_*), win. A missing or malformed variable throws std::invalid_argument naming it.
//
//   exec_slurm_task() sets that environment and execs `program` with argv; it returns only on
//   failure, errno set.
//
// Threading
//   slurm_task_environment: pure function of its arguments. exec_slurm_task changes the process
//   environment; call from main.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/worker_env.h"
#include "launcher/launch_inputs.h"

namespace crun {

EnvironmentList slurm_task_environment(const EnvSnapshot& env, const HostFacts& host,
                                       const std::optional<std::string>& master_addr,
                                       const std::optional<int>& master_port, const std::string& role);

void exec_slurm_task(const std::string& program, const std::vector<std::string>& argv, const EnvironmentList& env);

}  // namespace crun
