// to_launch_options: a resolved launch plan -> what run_launch acts on (the agent's AgentConfig,
// or the --slurm-tasks worker, or text to print).
//
// Contract
//   - Copies the plan's typed settings into AgentConfig (the agent trusts them: they were
//     validated in resolve_launch_plan) and the multi-node plan's MultiNodeConfig, whose is_host
//     the launcher decided.
//   - `exit_now`: --help / --version text, or with --print-config the plan as print_plan writes
//     it (launcher/print_config.h).
//
// Threading
//   Pure function.
#pragma once

#include <optional>
#include <string>

#include "agent/agent_config.h"
#include "agent/worker_env.h"
#include "launcher/launch_plan.h"

namespace crun {

struct LaunchOptions {
  AgentConfig agent;
  bool standalone = false;
  bool slurm_tasks = false;             // --slurm-tasks: exec worker_argv as this Slurm task
  EnvironmentList task_env;             // --slurm-tasks: the worker's environment
  std::string note;                     // a line to print before launching ("" = none)
  std::optional<std::string> exit_now;  // --help/--version/--print-config: print this, exit 0
};

LaunchOptions to_launch_options(const LaunchPlan& plan);

}  // namespace crun
