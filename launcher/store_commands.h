// The store's command-line faces: `crun store-server --host H --port P [--token T]` (a daemon that
// prints its bound host:port as its first line and serves until SIGINT/SIGTERM) and
// `crun store get|set|add|keys --endpoint H:P ...` (one-shot debugging). Each returns the process
// exit code (2 for bad usage). The token defaults to CRUN_RDZV_TOKEN of `env`; CRUN_STORE_TCP_ONLY=1
// there keeps the server and the client off the local socket (TCP alone). Called from main on the
// main thread.
#pragma once

#include "launcher/launch_inputs.h"

namespace crun {
int run_store_server_command(int argc, char** argv, const EnvSnapshot& env);
int run_store_client_command(int argc, char** argv, const EnvSnapshot& env);
}
