// RankStack: where one worker was when crun captured its stacks before stopping the group
// (docs/operations.md, "Stacks before the kill"). What capture produces on each node and what
// grouping (agent/stack_groups.h) merges across ranks and nodes.
//
// Contract
//   - A frame is one line a person reads: a function name, with "file:line" after it when known
//     ("stuck_here (train.py:12)"; a native frame: "all_reduce", or "0x7f.. ??" without symbols).
//     No addresses where a name is known: two ranks in the same place have equal frames.
//   - threads: each thread's frames, innermost first, in the order the capture listed them;
//     python_threads the same for the interpreter's threads (empty: not a Python worker, or its
//     Python stack could not be had).
//   - error: "" when captured, else one line saying why not ("timed out after 5 s",
//     "ptrace: Operation not permitted"); a rank with an error may still carry what was had.
//   - flight_dump: the rank's NCCL flight recorder dump file ("" when none was asked for:
//     agent/flight_dump.h), flight_dump_bytes its size then (0: absent), flight_error "" when it
//     was written whole within the bound, else one line. Not part of `error`: the stacks are
//     whole without it.
//
// Threading
//   Plain value; safe to copy between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace crun {

struct RankStack {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  std::vector<std::vector<std::string>> threads;         // native, innermost first
  std::vector<std::vector<std::string>> python_threads;  // Python, innermost first
  std::string error;
  std::string flight_dump;
  std::uint64_t flight_dump_bytes = 0;
  std::string flight_error;
};

}  // namespace crun
