// StackCapture: every local worker's stacks, taken in parallel within a bound before crun stops
// the group (docs/operations.md, "Stacks before the kill").
//
// Contract
//   - run(targets, done): for each target at once, and all within `timeout` of the call:
//       Python (CaptureTarget::python_dump non-empty and that file there, i.e. the worker
//       registered faulthandler: agent/python_stacks.h) and the worker catching `python_signal` now
//       (/proc/PID/status SigCgt: one that exec'd another program keeps its pid and file, not the
//       handler): the file is emptied, the worker is sent
//       `python_signal`, and the dump is read once it has plainly ended (stack_text.h's
//       faulthandler_done), or 100 ms after its last write (faulthandler writes no end mark; a
//       dump is written in one go by the signal handler, so a pause that long means it is over), or
//       at half the bound: what was written by then. Never a signal to a worker whose file is not
//       there (its default action would end it). Read with inotify, one instance for the whole
//       capture (a user has 128 by default), one watch per file: no polling.
//       Then, for every target: `eu_stack` (empty: none, the error "eu-stack not found" when
//       nothing else was had) -s -i -m -p PID (agent/bounded_command.h: its own
//       process group, output kept to the first kBytesPerRank bytes, SIGKILL at the bound).
//   - `done` runs once on the loop, with one RankStack per target in the targets' order: threads
//     from eu-stack, python_threads from the dump; error "" or one line: "timed out after N s"
//     (eu-stack did not finish: the worker is stopped, or held by another tracer),
//     "eu-stack: <its complaint>" when it gave no frame (no thread then), "Python stack: timed out after N s" when
//     the dump did not come (the native stack may still be there).
//   - NCCL flight recorder (agent/flight_dump.h): targets with a flight_pipe have their dump
//     asked for and awaited, at the same time as their stacks and within the same bound;
//     RankStack's flight_* fields say what came. `done` waits for it (never past the bound).
//   - A worker held by SIGSTOP or by another tracer delays nothing beyond the bound. Memory:
//     at most kBytesPerRank of eu-stack output and as much of a dump per target.
//   - No targets: `done` with none, posted. The destructor kills what still runs and never calls
//     `done`; run() again while one runs is refused (the first capture's `done` still comes).
//
// Threading
//   Constructed, run and destroyed on the agent's event-loop thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/rank_stack.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class WorkerContainment;

struct CaptureTarget {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  std::string python_dump;  // the file its faulthandler writes to; "" not a Python worker (or off)
  std::string flight_pipe;  // its NCCL flight recorder FIFO; "" none asked for
  std::string flight_dump;  // the file torch writes that dump to
};

struct StackCaptureOptions {
  std::chrono::milliseconds timeout{5000};
  std::string eu_stack = "eu-stack";  // a path
  int python_signal = 0;
  WorkerContainment* containment = nullptr;  // may be null (tests)
};

class StackCapture {
 public:
  static constexpr std::size_t kBytesPerRank = 256 * 1024;

  StackCapture(boost::asio::io_context& io, StackCaptureOptions options);
  ~StackCapture();
  StackCapture(const StackCapture&) = delete;
  StackCapture& operator=(const StackCapture&) = delete;

  // false (and `done` never called) when a capture is still running.
  bool run(std::vector<CaptureTarget> targets, std::function<void(std::vector<RankStack>)> done);
  bool running() const;

 private:
  struct Batch;
  boost::asio::io_context& io_;
  StackCaptureOptions options_;
  std::shared_ptr<Batch> batch_;
};

// "5 s", "0.5 s": a bound as the errors say it.
std::string bound_text(std::chrono::milliseconds bound);

}  // namespace crun
