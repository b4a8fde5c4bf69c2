// Standby workers (--standby-workers), the decisions: which local rank gets a standby and when, what
// it is started with, and the message that makes it a start's worker. The processes are
// agent/standby_pool.h's; the program they run, agent/standby_bootstrap.h's.
//
// Contract
//   - standbys_wanted: after the start with `restart_count`, standbys are kept when
//     config.standby_workers is on and another start can come: always with several nodes (the
//     coordinator decides, and a membership change restarts without counting), on one node while
//     restart_count < max_restarts. standbys_to_start: then every local rank whose `kept` entry is
//     false (one standby per local rank; a dead one is replaced only after the next start).
//   - python_program: a Python worker's argv, [interpreter, flags..., script | -m module, args...],
//     taken apart; nullopt for anything else (no program, -c).
//   - per_round_keys: the variables whose values differ between two starts of the group for this
//     local rank (agent/worker_env.h): derived, by planning two starts that differ in every field
//     of the round, so a variable made per-round later is never given to a standby. Today:
//     RANK GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK ROLE_WORLD_SIZE WORLD_SIZE MASTER_ADDR
//     MASTER_PORT TORCHELASTIC_RESTART_COUNT TORCHELASTIC_USE_AGENT_STORE TORCHELASTIC_ERROR_FILE
//     CRUN_CONTROL_FILE, and CRUN_HEARTBEAT_FILE with hang detection (tests/agent/standby_plan_test.cc).
//   - plan_standby_launch: the worker's plan for `start` (agent/worker_launch.h) with the
//     per-round variables removed and argv [interpreter, flags..., -c, bootstrap, LOCAL_RANK,
//     PRELOAD, KIND, TARGET] (PRELOAD: config.standby_preload joined by commas; KIND "script" or
//     "module"). nullopt when python_program finds no script or module in the worker's argv (the
//     launcher turns standbys on only for a program that runs under Python).
//   - standby_misfit: "" when a standby planned as `standby` can run `worker` (the same
//     executable, interpreter flags, program and CPUs), else why not, in a few words.
//   - standby_message: `worker`'s round as the bootstrap reads it: NUL-ended fields
//     "crun-standby-1", KIND, TARGET, N, N arguments, M, M words of argv, K, K environment
//     entries. Requires python_program(worker.argv).
//
// Threading
//   Pure; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/run_directory.h"
#include "agent/worker_launch.h"

namespace crun {

bool standbys_wanted(const AgentConfig& config, int restart_count);
std::vector<int> standbys_to_start(const AgentConfig& config, int restart_count, const std::vector<bool>& kept);

struct PythonProgram {
  std::vector<std::string> flags;  // the interpreter's, before the program ("-u")
  bool module = false;             // -m
  std::string target;              // the script's path or the module's name
  std::vector<std::string> args;   // the program's arguments
};
std::optional<PythonProgram> python_program(const std::vector<std::string>& argv);

std::vector<std::string> per_round_keys(const AgentConfig& config, const RunDirectory& run_dir, const GroupStart& start,
                                        int local_rank);
std::optional<WorkerLaunchPlan> plan_standby_launch(const AgentConfig& config, const RunDirectory& run_dir,
                                                    const GroupStart& start, int local_rank);
std::string standby_misfit(const WorkerLaunchPlan& standby, const WorkerLaunchPlan& worker);
std::string standby_message(const WorkerLaunchPlan& worker);

}  // namespace crun
