// crun's entry point: dispatches the store subcommands; everything else is a launch.
#include <cstring>

#include "launcher/launch_command.h"
#include "launcher/store_commands.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "store-server") == 0) {
    return crun::run_store_server_command(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return crun::run_store_client_command(argc - 1, argv + 1);
  }
  return crun::run_launch(argc, argv);
}
