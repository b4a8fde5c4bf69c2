// run_launch: `crun [options] program [args...]` — resolves the launch plan from argv, the
// environment and this host's facts (main reads them: launcher/launch_inputs.h), then runs the
// agent (or execs the --slurm-tasks worker, or prints). Returns the process exit code. Called once,
// from main, on the main thread.
//
// Exit codes of a launch
//   0        every worker exited 0
//   N        restarts exhausted: the root-cause worker's exit code N
//   128 + S  restarts exhausted and the root-cause worker was killed by signal S, or crun itself
//            received handled signal S (it forwarded S and stopped the workers)
//   2        bad usage: unknown flag, bad value, missing program (one line on stderr; nothing started)
//   3        the agent could not start (spawn, log dir or port failure)
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_inputs.h"

namespace crun {
int run_launch(const std::vector<std::string>& argv, const EnvSnapshot& env, const HostFacts& host);
}
