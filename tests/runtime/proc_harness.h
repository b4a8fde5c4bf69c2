// Test harness: starts N worker processes with the torchrun environment and waits for all of
// them with a bound (events: pipe EOF and child exit; never sleeps).
//
// Contract
//   run_ranks() forks `world` children running `argv` with RANK/WORLD_SIZE/LOCAL_RANK/
//   LOCAL_WORLD_SIZE/MASTER_ADDR=127.0.0.1/MASTER_PORT=<free port>/TORCHELASTIC_RESTART_COUNT
//   set (plus `extra_env`), collects each one's stdout+stderr, and returns when all exited. At
//   the deadline every remaining child is SIGKILLed and `timed_out` is set.
//   `on_output`, when given, is called after each piece of output a rank writes, with that rank,
//   all its output so far and every child's pid (by rank): a test waits on a line this way, e.g.
//   to signal the workers mid-run.
//
// Threading
//   Call from one thread; it reaps only the children it started.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace crun::test {

struct RankResult {
  int exit_code = -1;    // exit status, or 128+signal
  std::string output;    // stdout and stderr interleaved
};

struct RunResult {
  std::vector<RankResult> ranks;
  bool timed_out = false;
  std::string summary() const;
};

int free_port();

using OutputHook = std::function<void(int rank, const std::string& output, const std::vector<pid_t>& pids)>;

RunResult run_ranks(const std::vector<std::string>& argv, int world,
                    const std::vector<std::pair<std::string, std::string>>& extra_env = {},
                    std::chrono::milliseconds timeout = std::chrono::seconds(60), const OutputHook& on_output = {});

// Path of a helper binary built next to the test binary (CRUN_TEST_BIN_DIR).
std::string helper(const std::string& name);

}  // namespace crun::test
