// crun's entry point: dispatches the store subcommands, `status` and --expand-hostlist; everything else is
// a launch. Here, and only here, the launcher reads the world: the environment and this host's
// facts (launcher/launch_inputs.h) are taken once and handed down.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/exit_codes.h"
#include "launcher/hostlist.h"
#include "launcher/launch_inputs.h"
#include "launcher/launch_command.h"
#include "launcher/status_command.h"
#include "launcher/store_commands.h"

namespace {

// `crun --expand-hostlist EXPR`: Slurm's hostlist expansion, one host per line.
int expand_hostlist_command(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "crun: error: usage: crun --expand-hostlist EXPRESSION\n");
    return crun::kExitUsage;
  }
  try {
    for (const auto& host : crun::expand_hostlist(argv[2])) std::printf("%s\n", host.c_str());
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "crun: error: %s\n", e.what());
    return crun::kExitUsage;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "store-server") == 0) {
    return crun::run_store_server_command(argc - 1, argv + 1, crun::EnvSnapshot::from_process());
  }
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return crun::run_store_client_command(argc - 1, argv + 1, crun::EnvSnapshot::from_process());
  }
  if (argc >= 2 && std::strcmp(argv[1], "status") == 0) {
    return crun::run_status_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "--expand-hostlist") == 0) return expand_hostlist_command(argc, argv);
  return crun::run_launch(std::vector<std::string>(argv, argv + argc), crun::EnvSnapshot::from_process(),
                          crun::HostFacts::of_this_host());
}
