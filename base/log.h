// log: the one way crun's own lines (not its workers' output) reach stderr.
//
// Contract
//   - log_line(text): one line, "<program>: " + text + "\n" ("crun: " unless set_log_program
//     said otherwise; `text` holds no newline). log_text(text): lines as they are, each ending
//     in '\n' (a failure report). Either is written whole by the sink that takes it.
//   - Where a line goes is the calling thread's choice: while a LogRedirect lives on a thread,
//     that thread's lines go to its LogSink (the agent's event loop: its console sink, which
//     never blocks the loop on a stalled terminal; a store server's loop: a sink that drops what
//     stderr cannot take now). Elsewhere a line is one write_all() to descriptor 2 (a line of at
//     most PIPE_BUF bytes never interleaves with another writer's), blocking until it is taken:
//     an error before an event loop runs is never lost.
//   - stderr_without_blocking(): a sink that writes a line if stderr takes it now and drops it
//     otherwise (base/fd_io.h's write_without_blocking).
//   - Rate limits are the caller's (store/log_throttle.h); levels are not kept: crun says what it
//     does and why it stops, as torchrun's agent logs at its default level.
//
// Threading
//   Any thread. A LogRedirect belongs to the thread that made it (destroy it there; they nest).
//   set_log_program() before any other thread logs (at a program's start).
#pragma once

#include <string_view>

namespace crun {

class LogSink {
 public:
  virtual void write_log(std::string_view text) = 0;

 protected:
  ~LogSink() = default;
};

void log_line(std::string_view text);
void log_text(std::string_view text);

void set_log_program(const char* name);

LogSink& stderr_without_blocking();

class LogRedirect {
 public:
  explicit LogRedirect(LogSink& sink);
  ~LogRedirect();
  LogRedirect(const LogRedirect&) = delete;
  LogRedirect& operator=(const LogRedirect&) = delete;

 private:
  LogSink* previous_;
};

}  // namespace crun
