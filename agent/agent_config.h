// AgentConfig: everything the single-node agent needs to run a job, already validated.
//
// Contract
//   The launcher builds it from flags and PET_* variables; the agent trusts it (nproc >= 1,
//   worker_argv[0] an executable path, per-rank vectors of size nproc).
//   Stream bits: 1 = stdout, 2 = stderr (torchrun's Std: 0 none, 1 out, 2 err, 3 all).
//
// Threading
//   Plain value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crun {

struct AgentConfig {
  std::vector<std::string> worker_argv;  // argv[0]: the path execve runs
  int nproc_per_node = 1;
  int max_restarts = 0;
  std::chrono::milliseconds stop_timeout{30000};
  std::string role = "default";
  std::string run_id = "none";
  std::string master_addr = "127.0.0.1";
  std::optional<std::uint16_t> master_port;  // nullopt: a free port picked before each round
  std::vector<int> handled_signals;           // forwarded to workers, then crun stops

  std::vector<unsigned> redirects;  // per local rank: streams that go to files only
  std::vector<unsigned> tee;        // per local rank: streams that go to files and console
  std::vector<bool> console;        // per local rank: false when --local-ranks-filter hides it
  std::string log_dir;              // base log dir; empty: a temporary dir, removed at exit

  std::string hostname;
};

}  // namespace crun
