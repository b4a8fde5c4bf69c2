// A launch setting's value together with where it came from, and the launcher's usage error.
//
// Contract
//   - Sourced<T>: `value` and `source`, the flag, variable or rule that gave it ("--nnodes",
//     "PET_NNODES", "SLURM_NODEID", "default", ...); --print-config shows both.
//   - LaunchUsageError: a bad command line or launch environment. Its message is one line that
//     names the flag or variable at fault; crun prints it and exits 2 before anything starts.
//
// Threading
//   Plain value types.
#pragma once

#include <stdexcept>
#include <string>

namespace crun {

template <typename T>
struct Sourced {
  T value{};
  std::string source = "default";
};

class LaunchUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace crun
