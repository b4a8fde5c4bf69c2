// ChildProcess: runs a program (usually crun) for a test, captures stdout/stderr on a reader
// thread, and lets the test wait for events (a line, an exit) with a deadline, never by sleeping.
// The child gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG): a test killed
// by its timeout leaves nothing of what it started running.
//
// Threading: the reader thread fills the buffers; every public method may be called from the
// test's thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace crun::test {

using namespace std::chrono_literals;

class ChildProcess {
 public:
  // `env` entries "KEY=VALUE" are added to (or override) the test's environment. Only the last
  // `keep_stdout` bytes of stdout are kept (for a child that floods it); stdout_bytes() counts all.
  // With `stdout_held`, stdout is not read until release_stdout(): a console nobody reads.
  explicit ChildProcess(std::vector<std::string> argv, std::vector<std::string> env = {},
                        std::size_t keep_stdout = SIZE_MAX, bool stdout_held = false);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int signo);
  void release_stdout();

  // Waits until pred(stdout, stderr) holds; false on timeout.
  bool wait_until(const std::function<bool(const std::string&, const std::string&)>& pred,
                  std::chrono::milliseconds timeout);
  // Waits until stdout holds `needle` at least `times` times.
  bool wait_for_stdout(const std::string& needle, int times = 1, std::chrono::milliseconds timeout = 30s);
  // Waits for exit and for both pipes to close; exit code, or 128 + signal; nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = 60s);

  std::string out() const;
  std::string err() const;
  std::uint64_t stdout_bytes() const;

 private:
  void read_loop();

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int pidfd_ = -1;
  int wake_fd_ = -1;  // an eventfd: release_stdout() wakes the reader's poll
  std::atomic<bool> stdout_held_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string out_;
  std::string err_;
  std::size_t keep_stdout_ = SIZE_MAX;
  std::uint64_t stdout_bytes_ = 0;
  std::optional<int> code_;
  bool out_eof_ = false;
  bool err_eof_ = false;
  std::thread reader_;
};

// Counts occurrences of `needle` in `text`.
int count(const std::string& text, const std::string& needle);
// wait_exit()'s result for a failure message: "exit N" (128 + signal for a signal), or
// "no exit (timed out)". Build such a message after the wait: Catch's INFO formats at once.
std::string exit_text(const std::optional<int>& code);
// Lines of `text` (without newlines).
std::vector<std::string> lines(const std::string& text);
// Descriptors of `pid` whose open flags lack O_CLOEXEC, with what they point to.
std::map<int, std::string> fds_without_cloexec(pid_t pid);
// True when `pid` ends within `timeout` (pidfd; works for any process, not only children).
bool wait_pid_gone(pid_t pid, std::chrono::milliseconds timeout);
// True when `pid` ends and its parent reaps it (no zombie left) within `timeout` (pidfd's POLLHUP,
// Linux 6.9 and later).
bool wait_pid_reaped(pid_t pid, std::chrono::milliseconds timeout);

}  // namespace crun::test
