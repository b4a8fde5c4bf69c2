// print_plan: the text of `crun --print-config`, one line per setting: `NAME = VALUE  (SOURCE)`.
//
// Contract
//   Lines, in order: mode (single-node, multi-node or slurm-tasks, and what made it so); every
//   setting of launch_settings() as resolved text with its source (flag, PET_*, Slurm or platform
//   variable, default); for a multi-node run store_endpoint and store_host (this node or another,
//   and which rule decided, and store_local_socket); the settings with no flag (log_line_prefix,
//   run_dir, error_file, job_cgroup: launcher/agent_settings.h); run_id; program (the argv
//   workers are started with) and executable (the path execve runs, "PATH" when looked up there);
//   with --slurm-tasks each variable of the task's worker environment (`task NAME = VALUE`).
//
// Threading
//   Pure function.
#pragma once

#include <string>

#include "launcher/launch_plan.h"

namespace crun {

std::string print_plan(const LaunchPlan& plan);

}  // namespace crun
