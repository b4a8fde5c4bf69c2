// A worker's requests to crun through CRUN_CONTROL_FILE: the words and the bounds both sides keep.
//
// Contract
//   The protocol is one line appended to the file crun names in CRUN_CONTROL_FILE: a verb, a
//   space, a reason ("stop-job data corrupt\n"). The agent reads the file when the worker exits
//   (agent/control_file.h); the native workers' calls write it (worker_runtime/control.h).
//   - kControlLineMaxBytes: a line longer than this (its newline not counted) is ignored by the
//     agent; the runtime cuts a reason so that its line fits.
//   - kControlFileMaxBytes: the agent reads no further than this; what lies beyond is ignored.
//
// Threading
//   Constants only.
#pragma once

#include <cstddef>
#include <string_view>

namespace crun {

inline constexpr std::string_view kControlExcludeNode = "exclude-node";
inline constexpr std::string_view kControlStopJob = "stop-job";
inline constexpr std::size_t kControlLineMaxBytes = 1024;
inline constexpr std::size_t kControlFileMaxBytes = 64 * 1024;

}  // namespace crun
