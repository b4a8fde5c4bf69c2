// WorkerEnv: the torchrun-compatible environment a worker is started with, parsed and checked.
//
// Contract
//   - from_environment() reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE.
//   - When none of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT is set and `allow_single_process`,
//     it returns a single-process world (rank 0 of 1, store on 127.0.0.1, port chosen by the OS)
//     with `single_process = true`. When only some are set, or a value is malformed or out of
//     range, it throws InitError naming every offending variable.
//   - Optional variables default as torchrun does (LOCAL_RANK = RANK, LOCAL_WORLD_SIZE =
//     WORLD_SIZE, restart count 0).
//
// Threading
//   Reads the process environment; call it before starting threads that setenv().
#pragma once

#include <cstdint>
#include <string>

namespace crun::rt {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;
  int restart_count = 0;
  std::string run_id;
  bool use_agent_store = false;
  bool single_process = false;

  static WorkerEnv from_environment(bool allow_single_process = true);
  // True when master_addr names this host's loopback (127.0.0.0/8, ::1, localhost).
  bool master_is_loopback() const;
};

}  // namespace crun::rt
