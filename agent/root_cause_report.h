// The failure report of this node's root cause: assembled from the worker's exit and what the
// agent knows of that worker, and written to the run directory once it is final.
//
// Contract
//   - assemble_failure_report(exit, facts): the report of `exit` (its restart count, local rank,
//     pid, status and wall time) on this node (facts: role, host, the address other nodes reach
//     it at, the round's rank offset, so rank = rank_offset + local rank), with the message and
//     traceback of its error file (read now: "" when absent or unreadable), its stderr tail,
//     what the watchdog did to it and its request (CRUN_CONTROL_FILE: why it ended the group). `restarting` and `no_progress` are left false: the decision's,
//     set by the caller.
//   - write_failure_report(report, path): report.to_json() into `path` (written to "<path>.new"
//     and renamed over it: a reader sees the old report or the new one, whole); "" when written,
//     else one line saying why not.
//
// Threading
//   Any thread; assemble reads one file, write_failure_report writes one.
#pragma once

#include <string>
#include <vector>

#include "agent/agent_state_machine.h"
#include "agent/failure_report.h"

namespace crun {

struct RootCauseFacts {
  std::string role;
  std::string host;
  std::string addr;  // multi-node: the node's address; "" standalone
  int rank_offset = 0;
  std::string error_file;  // the worker's TORCHELASTIC_ERROR_FILE
  std::vector<std::string> stderr_tail;
  std::string watchdog;  // what the watchdog did to the worker ("": nothing)
  std::string request;   // the worker's request through CRUN_CONTROL_FILE, "stop-job REASON" ("": none)
};

FailureReport assemble_failure_report(const WorkerExit& exit, RootCauseFacts facts);

std::string write_failure_report(const FailureReport& report, const std::string& path);

}  // namespace crun
