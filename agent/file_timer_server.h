// FileTimerServer: serves the named pipe that torch's FileTimerClient writes
// (TORCHELASTIC_ENABLE_FILE_TIMER=1, pipe at TORCHELASTIC_TIMER_FILE), on the agent's event loop.
//
// Contract
//   - The constructor makes the FIFO at `path` (mode 0600; a FIFO left there by an earlier run is
//     replaced; any other file is refused) and opens it for reading, together with a writer of its
//     own so that workers closing their ends never end the stream. Throws std::runtime_error naming
//     the path and the reason when the FIFO cannot be made or opened. The destructor closes both
//     ends and removes the FIFO.
//   - Requests are read as they arrive (one JSON object per line, FileTimerTable's format); lines
//     longer than PIPE_BUF (FileTimerClient never writes more) are dropped. A request that is
//     malformed, from a pid that `owns(pid)` says is not one of our workers, or past the table's
//     bounds is ignored, with one log line (rate-limited per kind).
//   - One timer for the earliest deadline: when a scope expires, `on_expired` gets it with how far
//     past its deadline it was found. The server sends no signal itself: the agent owns the workers.
//   - forget(pid) drops a finished worker's scopes; clear() drops all (a new group starts).
//   Memory is bounded: one read buffer, one partial line of at most PIPE_BUF bytes, the table's
//   bounds.
//
// Threading
//   Constructed, used and destroyed on the event loop's thread; callbacks run there.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "agent/file_timer.h"

namespace boost::asio {
class io_context;
}

namespace crun {

struct FileTimerExpiry {
  FileTimerRequest request;
  std::chrono::milliseconds overdue{0};  // how long after its deadline the scope was found expired
};

class FileTimerServer {
 public:
  struct Callbacks {
    std::function<bool(int pid)> owns;                       // is this pid one of our workers?
    std::function<void(const FileTimerExpiry&)> on_expired;  // a scope ran past its deadline
    std::function<void(const std::string&)> log;             // one line, no newline
  };

  FileTimerServer(boost::asio::io_context& io, std::string path, Callbacks callbacks);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const;
  void forget(int pid);
  void clear();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crun
