// FlightDumps: every asked rank's NCCL flight recorder dump, requested through torch's pipe and
// awaited within a deadline, in parallel (agent/flight_recorder.h has torch's interface; part of
// the capture before a kill, agent/stack_capture.h).
//
// Contract
//   - run(requests, deadline, bound, done): for each request at once: the rank's pipe is opened
//     O_WRONLY|O_NONBLOCK (never a wait: no reader, ENXIO, or no pipe, ENOENT, ends that rank
//     at once with its error) and one byte written (a full pipe, EAGAIN: a request is already
//     pending; it counts); its dump file is awaited: an inotify watch on the file's folder, set
//     before the byte is written, for IN_CLOSE_WRITE or IN_MOVED_TO of that name (torch writes
//     it in place and closes it: the close says it is whole). No polling.
//   - `done` runs once on the loop, at the latest at `deadline`, with one FlightDump per request
//     in order: the dump's path; bytes (its size when it was closed, else at the end; 0 when
//     absent); error "" when it was
//     written whole after the request, else one line: "no reader on <pipe>", "no pipe <pipe>",
//     "<pipe>: <strerror>", "cannot watch <folder>: <strerror>", "not written within <bound> s" (a
//     file there may be an older dump: bytes says what is there).
//   - No requests: `done` with none, posted. The destructor stops the waits and never calls `done`.
//
// Threading
//   Constructed, run and destroyed on the agent's event-loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace crun {

struct FlightRequest {
  std::string pipe;  // the rank's FIFO
  std::string dump;  // the file torch writes the dump to
};

struct FlightDump {
  std::string path;
  std::uint64_t bytes = 0;
  std::string error;
};

class FlightDumps {
 public:
  explicit FlightDumps(boost::asio::io_context& io);
  ~FlightDumps();
  FlightDumps(const FlightDumps&) = delete;
  FlightDumps& operator=(const FlightDumps&) = delete;

  // `bound`: the capture's whole bound, as the error names it.
  void run(std::vector<FlightRequest> requests, std::chrono::steady_clock::time_point deadline,
           std::chrono::milliseconds bound, std::function<void(std::vector<FlightDump>)> done);

 private:
  struct Wait;
  boost::asio::io_context& io_;
  std::shared_ptr<Wait> wait_;
};

}  // namespace crun
