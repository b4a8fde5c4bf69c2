// Runtime: what a native worker creates first. Reads the torchrun/crun environment, brings up
// the bootstrap store, builds the process group and offers a heartbeat.
//
// Contract
//   - Runtime::init() parses WorkerEnv (see env.h; single-process fallback when the env is
//     entirely absent). Rank 0 hosts the bootstrap store at MASTER_ADDR:MASTER_PORT (binding
//     0.0.0.0, as PyTorch's TCPStore does) unless TORCHELASTIC_USE_AGENT_STORE says the agent
//     hosts it; every rank connects a client. All keys live under torchrun's per-start worker prefix
//     "//worker/attempt_<N>/" (store/torch_keys.h), N = TORCHELASTIC_RESTART_COUNT (or InitOptions::key_prefix), so a restarted
//     group never reads the previous start's keys, and on the agent store PyTorch workers of the
//     same start see the same keys.
//   - The process group ("gloo", "nccl" or "auto" = nccl when built with CUDA and a GPU is
//     visible, else gloo) is connected and a barrier passed before init() returns; any failure
//     (store unreachable, peer missing) throws InitError within `timeout`.
//   - heartbeat(step) tells crun's agent that this worker is making progress: when the agent
//     watches for hangs (--heartbeat-timeout / --initial-heartbeat-timeout; it then sets
//     CRUN_HEARTBEAT_FILE), it stores the step and the time in that file, mapped into memory at
//     init() (base/heartbeat_file.h); otherwise it does nothing. Two stores and a vDSO clock read,
//     no system call: call it every step. It never throws.
//   - Destruction: rank 0's store server stops with the Runtime; call finish() first (a barrier)
//     when other ranks might still use the store.
//
// Threading
//   Use a Runtime from one thread (the training thread). heartbeat() is also safe from another
//   thread (two atomic stores).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "store/store.h"
#include "worker_runtime/env.h"
#include "worker_runtime/gloo_process_group.h"
#include "worker_runtime/process_group.h"

namespace crun::rt {

struct InitOptions {
  std::string backend = "gloo";  // "gloo", "nccl" or "auto"
  Millis timeout{300000};        // bootstrap and default collective deadline
  GlooOptions gloo;              // its timeout is replaced by `timeout`
  bool allow_single_process = true;
  // The store keys' prefix; "": torch's per-start "//worker/attempt_<N>/". A program that runs
  // before the workers in the same start (crun-precheck) takes one of its own.
  std::string key_prefix;
};

class Runtime {
 public:
  static std::unique_ptr<Runtime> init(const InitOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const WorkerEnv& env() const;
  int rank() const { return env().rank; }
  int world_size() const { return env().world_size; }
  ProcessGroup& pg();
  // A Gloo group over the same ranks for host-memory collectives (checkpoints, metrics,
  // control): pg() itself when the backend is gloo, a second group when it is nccl.
  ProcessGroup& cpu_pg();
  // The per-restart store view (keys under "//worker/attempt_<N>/"). Same thread as the Runtime.
  crun::Store& store();

  void heartbeat(std::int64_t step) noexcept;
  // Barrier so that no rank still needs rank 0's store; then the Runtime may be destroyed.
  void finish();

 private:
  Runtime();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun::rt
