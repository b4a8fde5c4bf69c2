// ConsoleSink: one of the agent's console streams (its stdout or its stderr), written from the
// event loop without ever blocking it: a console nobody reads (a stopped terminal, a pager, a
// full pipe) stalls the workers' output, never the agent's heartbeats, signals or endpoint.
//
// Contract
//   - write(data, size) takes the bytes at once. What the stream does not accept now waits in a
//     backlog, in order, and goes out as the stream drains (a wait for writability on the loop).
//     Nothing is dropped unless the stream fails (EPIPE: its reader is gone; then, as with a
//     blocking write before, the rest is dropped).
//   - The stream's open file description is shared (the shell, other programs): its flags are
//     never changed. A pipe or socket is written with RWF_NOWAIT; where the kernel refuses that,
//     a socket with MSG_DONTWAIT, and a pipe, FIFO or terminal through a non-blocking description
//     of its own (reopened through /proc/self/fd on first need); a regular file (which does not
//     stall) and anything that cannot be reopened are written as before, blocking.
//   - backlogged(): the backlog holds more than kHighWater bytes. Readers of workers' output
//     (WorkerGroup) then stop reading and ask when_drained(fn): fn runs once, on the loop, when
//     the backlog is down to kHighWater / 2 (at once when it already is). The backlog so passes
//     kHighWater only by what was read before the readers stopped.
//   - A pipe is written in whole lines: one write holds the lines that fit PIPE_BUF (a longer
//     line alone), which the kernel takes whole or not at all, so no other writer of the pipe
//     lands inside a line of ours.
//   - same_stream(a, b): the two descriptors name one file (`2>&1`, a shared terminal). Two
//     sinks on one file would each keep a backlog and split each other's lines; write both
//     streams through one sink instead.
//   - flush() writes the backlog out, waiting as long as the stream takes (the agent's end, once
//     the loop has stopped: no line is lost at exit, as with the blocking writes before).
//   - The loop waits for room through an epoll instance of the sink's own holding the stream
//     (Asio's waits set O_NONBLOCK on what they wait on). The stream's descriptor is not owned;
//     the epoll instance and a reopened description are, made at first need, close-on-exec, and
//     closed at destruction. Unwritten bytes are dropped by the destructor: call flush() first.
//
// Threading
//   The event loop's thread only (write, when_drained, flush); not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace boost::asio {
class io_context;
}

namespace crun {

class ConsoleSink {
 public:
  static constexpr std::size_t kHighWater = std::size_t{1} << 20;

  ConsoleSink(boost::asio::io_context& io, int fd);
  ~ConsoleSink();
  ConsoleSink(const ConsoleSink&) = delete;
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  void write(const char* data, std::size_t size);
  bool backlogged() const;
  void when_drained(std::function<void()> fn);
  void flush();
  std::size_t backlog_bytes() const;

  static bool same_stream(int a, int b);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
