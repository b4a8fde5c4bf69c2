// Where torch's TCPStore clients put their keys on a store that also serves crun's clients
// (docs/store-protocol.md, "Keys").
//
// Contract
//   - TCPStore puts "/" in front of every key its user passes (its root); torch's waitForWorkers
//     counts workers in "init/", outside that root.
//   - torchrun's agent store gives each start of the worker group the view
//     PrefixStore("/worker/attempt_<restart count>"), so those workers' keys are
//     "//worker/attempt_<N>/<key>" on the wire. torch_worker_prefix(N) is that prefix: a native
//     worker that uses it shares its keys with PyTorch workers of the same start;
//     torch_workers_root() holds every start's (the coordinator clears it as each round forms).
//   - crun's own keys (the rendezvous' "crun/rdzv/<run id>/...") never start with "/" and are
//     never "init/": torch's clients cannot reach them by name.
//
// Threading
//   Pure functions.
#pragma once

#include <string>

namespace crun {

// Every start's workers' keys are under this root.
inline std::string torch_workers_root() { return "//worker/"; }

inline std::string torch_worker_prefix(int restart_count) {
  return "//worker/attempt_" + std::to_string(restart_count) + "/";
}

}  // namespace crun
