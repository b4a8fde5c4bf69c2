// `crun status URL [--json] [--timeout SECONDS]`: reads an agent's GET /status (its
// --health-check-port; node rank 0's holds the whole job) and prints the job as tables: a summary
// line, one row per node, one per rank, and the last failure with its stderr tail; --json prints
// the document as the agent sent it. URL: http://HOST:PORT[/] or HOST:PORT.
//
// Contract
//   Returns the process exit code: 0 printed, 1 the agent could not be read (unreachable, no
//   answer within the timeout (default 5 s), an answer that is not a /status document; one line
//   naming the URL and why), 2 bad usage. The answer read is bounded (16 MiB).
//
// Threading
//   Called from main on the main thread.
#pragma once

#include <string>
#include <vector>

namespace crun {

int run_status_command(const std::vector<std::string>& args);
// The tables for a /status document (throws std::runtime_error when it is not one).
std::string format_job_status(const std::string& status_json);

}  // namespace crun
