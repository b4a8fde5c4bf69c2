// FileTimerTable: the scopes that torch's file timer (torch.distributed.elastic.timer's
// FileTimerClient) holds open, and which of them are overdue. No pipe, no clock of its own.
//
// Contract
//   - parse_file_timer_request(line) reads one request line as FileTimerClient writes it:
//     {"version": 1, "pid": P, "scope_id": "S", "expiration_time": T, "signal": N}, T in wall-clock
//     seconds since the epoch (Python's time.time()). Anything else (bad JSON, a missing or mistyped
//     field, a pid <= 0, a scope id over kMaxScopeIdBytes) throws std::invalid_argument naming it.
//   - apply(request): expiration_time < 0 releases (pid, scope_id) (torch's release()); otherwise
//     it acquires the scope or moves its deadline. A worker holds at most kMaxScopesPerPid scopes
//     and the table at most kMaxTimers: an acquire past either bound is refused (returns false)
//     and the table is unchanged, so a worker cannot grow the agent's memory without limit.
//   - expire(now) removes and returns every timer with expiration_time <= now, earliest first.
//   - next_expiry() is the earliest expiration time held, nullopt when empty.
//   - forget(pid) drops the timers of a worker that is gone.
//   - LineSplitter cuts a byte stream, fed in any pieces, into lines of at most `max_line` bytes
//     (without the newline); a longer line is dropped whole and reported once. It holds at most
//     `max_line` bytes between calls.
//
// Threading
//   Not thread-safe; owned by the agent's event loop (or a test).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace crun {

struct FileTimerRequest {
  int pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // wall clock, seconds since the epoch; < 0: release
  int signal = 0;              // to send on expiry; <= 0: report, do not signal (torch's rule)
};

FileTimerRequest parse_file_timer_request(std::string_view line);

class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line) : max_line_(max_line) {}
  void feed(std::string_view bytes, const std::function<void(std::string_view line)>& on_line,
            const std::function<void()>& on_oversized);
  std::size_t held() const { return partial_.size(); }

 private:
  std::size_t max_line_;
  std::string partial_;
  bool dropping_ = false;
};

class FileTimerTable {
 public:
  static constexpr std::size_t kMaxScopeIdBytes = 1024;
  static constexpr std::size_t kMaxScopesPerPid = 1024;
  static constexpr std::size_t kMaxTimers = 16384;

  bool apply(const FileTimerRequest& request);
  std::vector<FileTimerRequest> expire(double now);
  std::optional<double> next_expiry() const;
  void forget(int pid);
  std::size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<int, std::string>, FileTimerRequest> timers_;
  std::map<int, std::size_t> scopes_of_pid_;
};

}  // namespace crun
