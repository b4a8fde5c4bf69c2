#include "launcher/launch_command.h"

#include <cstdio>
#include <cstring>

#include "agent/agent.h"
#include "base/exit_codes.h"
#include "launcher/launch_options.h"
#include "launcher/launch_plan.h"
#include "launcher/slurm_tasks.h"

namespace crun {

int run_launch(const std::vector<std::string>& argv, const EnvSnapshot& env, const HostFacts& host) {
  LaunchOptions options;
  try {
    options = to_launch_options(resolve_launch_plan(argv, env, host));
  } catch (const LaunchUsageError& e) {
    std::fprintf(stderr, "crun: error: %s\n", e.what());
    return kExitUsage;
  }
  if (options.exit_now) {
    std::fputs(options.exit_now->c_str(), stdout);
    return 0;
  }
  if (options.slurm_tasks) {
    const auto& program = options.agent.worker_program;
    exec_slurm_task(program, options.agent.worker_argv, options.task_env);
    const int err = errno;
    std::fprintf(stderr, "crun: error: cannot run %s: %s\n",
                 (program.empty() ? options.agent.worker_argv.front() : program).c_str(), std::strerror(err));
    return kExitAgentError;
  }
  if (!options.note.empty()) std::fprintf(stderr, "%s\n", options.note.c_str());
  Agent agent(std::move(options.agent));
  return agent.run();
}

}  // namespace crun
