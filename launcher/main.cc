// crun's entry point: dispatches the store subcommands and --expand-hostlist; everything else is
// a launch.
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "base/exit_codes.h"
#include "launcher/hostlist.h"
#include "launcher/launch_command.h"
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
    return crun::run_store_server_command(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return crun::run_store_client_command(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--expand-hostlist") == 0) return expand_hostlist_command(argc, argv);
  return crun::run_launch(argc, argv);
}
