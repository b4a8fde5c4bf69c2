// run_launch: `crun [options] program [args...]` — resolves the launch plan from argv, the
// environment and this host's facts (main reads them: launcher/launch_inputs.h), then runs the
// agent (or execs the --slurm-tasks worker, or prints). Returns the process exit code. Called once,
// from main, on the main thread.
//
// Exit codes: base/exit_codes.h's table (what --help prints and README.md lists).
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_inputs.h"

namespace crun {
int run_launch(const std::vector<std::string>& argv, const EnvSnapshot& env, const HostFacts& host);
}
