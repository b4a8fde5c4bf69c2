// worker_environment: the environment of one worker: torchrun's contract, variable for variable.
//
// Contract
//   worker_variables() returns what a worker gets on top of `base` ("KEY=VALUE" strings, usually
//   the agent's own environ): LOCAL_RANK RANK GROUP_RANK GROUP_WORLD_SIZE ROLE_NAME ROLE_RANK
//   ROLE_WORLD_SIZE LOCAL_WORLD_SIZE WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT
//   TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE (True when place.agent_store), with RANK =
//   ROLE_RANK = place.rank_offset + local_rank and the restart count the round's;
//   TORCHELASTIC_ERROR_FILE when who.error_file is set (else `base`'s value stays);
//   TORCHELASTIC_TIMER_FILE when who.timer_file is set (torch's file timer, served by the agent);
//   CRUN_HEARTBEAT_FILE when who.heartbeat_file is set (base/heartbeat_file.h);
//   CRUN_STATE_DIR when who.state_dir is set (agent/state_directory.h: the rank's directory);
//   CRUN_CONTROL_FILE when who.control_file is set (agent/control_file.h: the worker's requests);
//   TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (torch >= 2.2's name) and NCCL_ASYNC_ERROR_HANDLING=1
//   (torch 1.x-2.1's, what torchrun 1.13 sets) unless `base` has them; when `base` has only one
//   spelling of ASYNC_ERROR_HANDLING or BLOCKING_WAIT, the other gets its value (one setting for
//   every torch version; the launcher refuses two spellings that disagree);
//   CRUN_PG_TIMEOUT_SEC when who.pg_timeout_sec is set, unless `base` has it (launcher/timeout_order.h); OMP_NUM_THREADS=1 unless
//   `base` has it or local_world_size is 1 (as torchrun); CRUN_AGENT_ID=<agent_id>
//   (worker_containment.h) when agent_id is set. With who.visible_device (torch's
//   --virtual-local-rank) LOCAL_RANK is 0 and CUDA_VISIBLE_DEVICES that device. Each key once.
//   worker_environment() is `base` with those variables set (replacing `base`'s own): the
//   complete environment of one worker. The agent and `crun --slurm-tasks` both build their
//   workers' environment here.
//
// Threading
//   Pure functions (current_environment() reads environ).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/rendezvous_backend.h"

namespace crun {

struct WorkerIdentity {
  int local_rank = 0;
  int local_world_size = 1;
  int max_restarts = 0;
  std::string role = "default";
  std::string run_id = "none";
  std::string error_file;
  std::string timer_file;      // the FIFO of torch's file timer ("" = off)
  std::string heartbeat_file;  // this worker's heartbeat file ("" = crun does not watch for hangs)
  std::string agent_id;
  std::string state_dir;       // CRUN_STATE_DIR ("" = none)
  std::string control_file;    // CRUN_CONTROL_FILE ("" = none: nobody reads requests)
  // torch's --virtual-local-rank: LOCAL_RANK=0 and this CUDA_VISIBLE_DEVICES (nullopt: off).
  std::optional<std::string> visible_device;
  std::string pg_timeout_sec;  // --pg-timeout as CRUN_PG_TIMEOUT_SEC ("": none)
};

using EnvironmentList = std::vector<std::pair<std::string, std::string>>;

EnvironmentList worker_variables(const std::vector<std::string>& base, const RoundInfo& place,
                                 const WorkerIdentity& who);
std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const RoundInfo& place, const WorkerIdentity& who);

// The calling process's environment as "KEY=VALUE" strings.
std::vector<std::string> current_environment();

}  // namespace crun
