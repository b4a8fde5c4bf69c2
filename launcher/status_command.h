// `crun status URL [--json] [--stacks] [--timeout SECONDS]`: reads an agent's GET /status (its
// --health-check-port; node rank 0's holds the whole job) and prints the job as tables: a summary
// line (and the heartbeat timeout in force, when there is one), one row per node, one per rank,
// the last failure with its stderr tail and the stacks before the kill grouped across ranks (one
// line per group); --json prints the document as the agent sent it; --stacks prints only the
// job's grouped stacks, each group with its frames (--stacks --json: the job's "stack_groups"
// object, null when none). URL: http://HOST:PORT[/] or HOST:PORT.
//
// Contract
//   - parse_status_arguments(args) (the words after `status`) parses them with CLI11, as the
//     launch's command line is: one URL, --json, --timeout SECONDS in (0, 3600] (default 5),
//     -h/--help (the request then carries the help text and nothing else is checked). An unknown
//     option, a second URL, no URL, a bad timeout or a URL crun cannot read (not http://, no
//     port, port 0) throws StatusUsageError with one line naming it.
//   - run_status_command(args) returns the process exit code: 0 printed (or the help), 1 the agent
//     could not be read (unreachable, no answer within the timeout, an answer that is not a
//     /status document; one line naming the URL and why), 2 bad usage (one line: the error and
//     the usage). The answer read is bounded (16 MiB).
//   - format_job_status(json) is the tables for a /status document, format_job_stacks(json) its
//     grouped stacks (both throw std::runtime_error when it is not one; a "stack_groups" that
//     agent/stack_groups.h does not read back is not one either).
//
// Threading
//   Called from main on the main thread; parse_status_arguments and format_job_status are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace crun {

struct StatusUsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct StatusRequest {
  std::string url;  // as given
  std::string host;
  std::uint16_t port = 0;
  bool as_json = false;
  std::chrono::milliseconds timeout{5000};
  std::optional<std::string> help;  // -h/--help: print this, exit 0
  bool stacks = false;  // --stacks
};

StatusRequest parse_status_arguments(const std::vector<std::string>& args);
int run_status_command(const std::vector<std::string>& args);
// The tables for a /status document (throws std::runtime_error when it is not one).
std::string format_job_status(const std::string& status_json);
// --stacks: the job's stacks before the kill, grouped across ranks, each group with its frames;
// "no stacks captured" when there are none.
std::string format_job_stacks(const std::string& status_json);

}  // namespace crun
