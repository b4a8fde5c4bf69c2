// parse_launch_options: torchrun's command line (and PET_* defaults) -> the agent's AgentConfig.
//
// Contract
//   - Accepts every torchrun flag in both spellings (--nproc-per-node / --nproc_per_node), each
//     defaulting from PET_<NAME> (e.g. PET_NPROC_PER_NODE), plus crun's --stop-timeout and
//     --version. Parsing stops at the program; everything after it is the program's.
//   - Validates everything before anything starts: a bad value, an unknown flag, a missing
//     program or interpreter raises LaunchUsageError whose message is one line naming the flag.
//   - Each setting comes from its flag, else PET_<NAME>, else the Slurm or platform environment
//     (launcher/job_environment.h), else torchrun's default; --print-config lists every value
//     with its source (exit_now).
//   - `--help` / `--version` set `exit_now` with the text to print (exit 0).
//
// Threading
//   Pure function of argv and the process environment; call from main.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "agent/agent_config.h"
#include "launcher/slurm_tasks.h"

namespace crun {

class LaunchUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  AgentConfig agent;
  bool standalone = false;
  bool slurm_tasks = false;             // --slurm-tasks: exec worker_argv as this Slurm task
  EnvironmentList task_env;             // --slurm-tasks: the worker's environment
  std::string note;                     // a line to print before launching ("" = none)
  std::optional<std::string> exit_now;  // --help/--version/--print-config: print this, exit 0
};

LaunchOptions parse_launch_options(int argc, char** argv);

}  // namespace crun
