// The open-files limit (RLIMIT_NOFILE) of a process that holds many connections.
//
// Contract
//   - raise_open_files_limit(wanted) raises the soft limit to min(wanted, hard) when it is lower,
//     never lowers it, and returns the limits before and after. The first raise remembers the
//     soft limit the process started with: inherited_open_files_soft_limit() returns it (0: never
//     raised), so that a process started later (a worker) can be given back what crun itself was
//     given (programs that use select() expect at most 1024).
//   - restore_open_files_soft_limit() sets that limit again (raw system calls only: it runs in a
//     vfork child before exec); nothing when none was raised.
//
// Threading
//   Process-wide state; raise from one thread at a time (the store's start). The restore reads
//   one word and is async-signal-safe.
#pragma once

#include <cstdint>

namespace crun {

struct OpenFilesLimit {
  std::uint64_t before = 0;  // soft limit before the call
  std::uint64_t now = 0;     // soft limit after it
  std::uint64_t hard = 0;
};

OpenFilesLimit raise_open_files_limit(std::uint64_t wanted);
std::uint64_t inherited_open_files_soft_limit();
void restore_open_files_soft_limit();

}  // namespace crun
