#include "launcher/launch_command.h"

#include <cstdio>
#include <cstring>

#include "agent/agent.h"
#include "base/exit_codes.h"
#include "launcher/launch_options.h"
#include "launcher/slurm_tasks.h"

namespace crun {

int run_launch(int argc, char** argv) {
  LaunchOptions options;
  try {
    options = parse_launch_options(argc, argv);
  } catch (const LaunchUsageError& e) {
    std::fprintf(stderr, "crun: error: %s\n", e.what());
    return kExitUsage;
  }
  if (options.exit_now) {
    std::fputs(options.exit_now->c_str(), stdout);
    return 0;
  }
  if (options.slurm_tasks) {
    const int err = exec_slurm_task(options.agent.worker_argv, options.task_env);
    std::fprintf(stderr, "crun: error: cannot run %s: %s\n", options.agent.worker_argv.front().c_str(), std::strerror(err));
    return kExitAgentError;
  }
  if (!options.note.empty()) std::fprintf(stderr, "%s\n", options.note.c_str());
  Agent agent(std::move(options.agent));
  return agent.run();
}

}  // namespace crun
