// run_launch: `crun [options] program [args...]` — parses the torchrun-compatible CLI and runs the
// agent. Returns the process exit code. Called once, from main, on the main thread.
#pragma once

namespace crun {
int run_launch(int argc, char** argv);
}
