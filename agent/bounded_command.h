// BoundedCommand: one helper program run on the agent's event loop without blocking it, its
// output kept within a bound, its life within a deadline. What a node check (agent/node_check.h)
// and a stack capture (agent/stack_capture.h) both run.
//
// Contract
//   - run(argv, done): argv[0] must be a path (resolve_executable). Started with
//     agent/worker_process.h's spawn: a process group of its own, only descriptors 0-2,
//     PDEATHSIG, stdin /dev/null; stdout and stderr on one pipe (SpawnOptions::merge_stderr).
//   - What it prints is read as it comes; `keep` decides what stays: the first `bytes` (Keep::kHead,
//     the rest read and dropped) or the last `bytes` (Keep::kTail). Memory stays bounded whatever it
//     prints.
//   - `done` runs on the loop once, with the exit status (nullopt when it could not start:
//     BoundedResult::start_error says why), timed_out when the deadline sent it SIGKILL, and what was
//     kept. At the deadline the process group is sent SIGKILL; after it ends, whatever is left in its
//     group is killed too.
//   - The destructor (or a second run()) kills a command still running and never calls `done`.
//   - `containment` (may be null: tests): the command is made known to it as workers are (the
//     subreaper neither reaps nor kills it; the keeper kills it if the agent dies).
//
// Threading
//   Constructed, run and destroyed on the agent's event-loop thread (PR_SET_PDEATHSIG belongs to
//   the forking thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/exit_status.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class WorkerContainment;

struct BoundedResult {
  std::optional<ExitStatus> status;  // nullopt: not started (start_error)
  std::string start_error;
  bool timed_out = false;
  bool truncated = false;  // output beyond the bound was dropped
  std::string output;      // stdout and stderr together, within the bound
};

class BoundedCommand {
 public:
  enum class Keep { kHead, kTail };

  BoundedCommand(boost::asio::io_context& io, std::chrono::milliseconds timeout, Keep keep, std::size_t bytes,
                 WorkerContainment* containment = nullptr);
  ~BoundedCommand();
  BoundedCommand(const BoundedCommand&) = delete;
  BoundedCommand& operator=(const BoundedCommand&) = delete;

  void run(const std::vector<std::string>& argv, std::function<void(BoundedResult)> done);
  // Ends a command still running now (SIGKILL to its group); `done` then comes with timed_out.
  void expire();

 private:
  struct Running;
  boost::asio::io_context& io_;
  std::chrono::milliseconds timeout_;
  Keep keep_;
  std::size_t bytes_;
  WorkerContainment* containment_;
  std::shared_ptr<Running> running_;
};

}  // namespace crun
