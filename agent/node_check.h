// CommandCheck: one operator-given node check (`--node-check CMD`) run on the agent's loop
// without blocking it; split_command() turns CMD into its words.
//
// Contract
//   - split_command(text): the words of `text` as a POSIX shell splits them (blanks separate;
//     single quotes, double quotes with \\ \" \$ \` escapes, a backslash outside quotes); no
//     expansion and no shell is ever run. nullopt with `error` set (one line) for an unbalanced
//     quote or a command with no word.
//   - run(done) starts the command (the program found on `search_path` when its name has no
//     '/'; agent/bounded_command.h runs it: a process group of its own, only descriptors 0-2,
//     PDEATHSIG, stdin /dev/null; stdout and stderr on one pipe, SpawnOptions::merge_stderr).
//     What it prints is read as it comes and dropped but for the last kTailBytes: the reason's
//     last kTailLines lines. Memory stays bounded whatever it prints. `done` runs on the loop once: healthy (exit code 0), or unhealthy with a one-line
//     reason ("exit code 3: <its last lines, ' | ' between them>", "killed by SIGSEGV", "no
//     answer within 30 s (killed)", "not found"). At the timeout the check's process group is
//     sent SIGKILL; after it ends, whatever is left in its group is killed too.
//   - The destructor (or a second run()) kills a check still running and never calls `done`.
//
// Threading
//   Constructed, run and destroyed on the agent's event-loop thread (PR_SET_PDEATHSIG belongs to
//   the forking thread).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace crun {

class BoundedCommand;
class WorkerContainment;

// One check's verdict: `reason` empty when healthy.
struct NodeCheckResult {
  std::string check;   // its name: "disk", "net", "gpu", or the command as given
  std::string reason;  // one line; "" healthy
  bool healthy() const { return reason.empty(); }
};

std::optional<std::vector<std::string>> split_command(const std::string& text, std::string& error);

class CommandCheck {
 public:
  static constexpr std::size_t kTailBytes = 4096;
  static constexpr int kTailLines = 5;

  // `containment` (may be null: tests): the check is made known to it as workers are (the
  // subreaper neither reaps nor kills it; the keeper kills it if the agent dies).
  CommandCheck(boost::asio::io_context& io, std::string command, std::chrono::milliseconds timeout,
               std::string search_path, WorkerContainment* containment = nullptr);
  ~CommandCheck();
  CommandCheck(const CommandCheck&) = delete;
  CommandCheck& operator=(const CommandCheck&) = delete;

  void run(std::function<void(NodeCheckResult)> done);
  const std::string& command() const { return command_; }

 private:
  boost::asio::io_context& io_;
  std::string command_;
  std::chrono::milliseconds timeout_;
  std::string search_path_;
  WorkerContainment* containment_;
  std::unique_ptr<BoundedCommand> running_;
};

}  // namespace crun
