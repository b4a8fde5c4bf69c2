// A native worker's requests to crun: the calls behind CRUN_CONTROL_FILE (docs/operations.md,
// "Requests from workers"). Python needs none of this: it appends the line itself.
//
// Contract
//   - request_exclude_node(reason): this node is bad; crun restarts the job without it (on one
//     node, where none can replace it, crun exits 9). request_stop_job(reason): no restart; crun
//     exits with this worker's own exit code.
//   - Each appends one line, "exclude-node REASON" or "stop-job REASON", to the file named by
//     CRUN_CONTROL_FILE, in one write(2) with O_APPEND (lines of several threads never mix). The
//     reason's newlines and other control characters become spaces, and it is cut (at a UTF-8
//     character's start) so that the line fits the agent's bound of 1024 bytes.
//   - Nothing happens until the worker exits: crun reads the file then. The worker should exit
//     soon after; its exit code is the one crun passes on for stop-job.
//   - Not under crun (CRUN_CONTROL_FILE unset or empty): nothing is written, and the call returns
//     false, so the same program runs under other launchers. Returns true once the line is written;
//     throws std::system_error naming the file when it cannot be opened or written.
//
// Threading
//   Any thread; reads the environment (getenv) at each call.
#pragma once

#include <string_view>

namespace crun::rt {

bool request_exclude_node(std::string_view reason);
bool request_stop_job(std::string_view reason);

}  // namespace crun::rt
