#include "launcher/launch_command.h"

#include <cstdio>

#include "agent/agent.h"
#include "launcher/launch_options.h"

namespace crun {

int run_launch(int argc, char** argv) {
  LaunchOptions options;
  try {
    options = parse_launch_options(argc, argv);
  } catch (const LaunchUsageError& e) {
    std::fprintf(stderr, "crun: error: %s\n", e.what());
    return 2;
  }
  if (options.exit_now) {
    std::fputs(options.exit_now->c_str(), stdout);
    return 0;
  }
  Agent agent(std::move(options.agent));
  return agent.run();
}

}  // namespace crun
