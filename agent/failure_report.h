// FailureReport: what crun tells the user about the root-cause worker of a failed round.
//
// Contract
//   - format_text() is short: one header line naming rank, local rank, host (with the node's
//     address when it has one: two hosts may share a hostname), pid, exit code or signal name,
//     and time, then what the watchdog saw (when crun stopped the worker), the worker's request
//     (CRUN_CONTROL_FILE), the error-file message (if any), the error file's traceback
//     (its last 40 lines; left out when the stderr tail already ends the same way, i.e. Python
//     printed it), the last stderr lines and the stacks before the kill grouped across ranks
//     (one line per group, the odd one out marked).
//   - to_json() carries the same fields (written to --log-dir as failure_report.json, and what a
//     node publishes to the rendezvous, so that node rank 0 can print and write a root cause
//     from another node). from_json() reads it back (nullopt for text that is not such a report);
//     from_json(to_json()) == the report, to the millisecond.
//   - stacks: every local worker's stacks as crun captured them before it stopped the group
//     (agent/stack_capture.h; docs/operations.md, "Stacks before the kill"), raw, one entry per
//     rank; empty when none were captured. JSON key "stacks": [{rank, local_rank, pid, threads,
//     python_threads, error, flight_recorder}], left out when empty; flight_recorder ({file,
//     bytes, error}: the rank's NCCL flight recorder dump, agent/flight_dump.h) only when one was
//     asked for. format_text() names where the root cause's rank was when its stacks are among
//     them (one line), and its flight recorder dump when it came whole (one line).
//   - read_error_file_message() understands torch's @record JSON ({"message": {"message": ...,
//     "extraInfo": {...}}} or {"message": "..."}); returns "" when the file is absent or unreadable.
//   - copy_error_file_to_parent() does what torchrun's @record main does when the job fails: the
//     root cause's error file replaces the launcher's own TORCHELASTIC_ERROR_FILE, with
//     message.errorCode set to the worker's status as torchrun encodes it (ExitStatus::
//     torch_exitcode(): -N when killed by signal N) when the message has torch's object form and
//     the worker failed. Returns "" when written, else why not.
//
// Threading
//   Pure value type and functions; safe from any thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/exit_status.h"
#include "agent/rank_stack.h"
#include "agent/stack_groups.h"

namespace crun {

struct FailureReport {
  std::string role = "default";
  int restart_count = 0;
  bool restarting = false;
  bool no_progress = false;  // not restarting: the restarts made no progress (kExitNoProgress)
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string addr;  // multi-node: the address the other nodes reach this node at; "" standalone
  int pid = 0;
  ExitStatus status;  // the worker's exit code or signal
  std::chrono::system_clock::time_point time{};
  std::string error_file;
  std::string error_message;  // from the worker's error file, if it wrote one
  std::string error_traceback;  // the error file's py_callstack (torch's @record), if any
  std::vector<std::string> stderr_tail;
  // What crun's watchdog saw when it stopped this worker itself (a file-timer scope past its
  // deadline); "" when the worker ended on its own.
  std::string watchdog;
  // The coordinator excluded this node for it (docs/rendezvous.md, "Exclusion"): "excluded for
  // 600 s (exclusion 1): the root cause 2 times"; "" when it did not.
  std::string excluded;
  // The worker's request through CRUN_CONTROL_FILE that ended the group ("stop-job REASON",
  // agent/control_file.h); "" when none. Shown on its own line, and why no restart follows.
  std::string request;
  // This node's workers' stacks, captured before the stop (see the contract).
  std::vector<RankStack> stacks;
  // The workers' stacks before the kill, grouped across ranks (agent/stack_groups.h): this
  // node's; on node rank 0, every node's of the round that reached it, merged. Empty: none
  // captured. JSON "stack_groups" (absent when empty); text: one line per group after the rest.
  StackGroups stack_groups;
  // Node rank 0, the job closed: the nodes whose stacks did not reach it within the bound
  // (agent/closing_stacks.h), ascending. JSON "stacks_missing_nodes" (absent when empty); text:
  // one line after the groups.
  std::vector<int> stacks_missing_nodes;

  std::string format_text() const;
  std::string to_json() const;
  static std::optional<FailureReport> from_json(std::string_view text);
};

std::string read_error_file_message(const std::string& path);
// message.extraInfo.py_callstack of torch's @record JSON; "" when absent.
std::string read_error_file_traceback(const std::string& path);

std::string copy_error_file_to_parent(const std::string& worker_file, const std::string& parent_file,
                                      const ExitStatus& status);

}  // namespace crun
