// LineRouter: carries one worker stream (stdout or stderr) to where it belongs, in whole lines.
//
// Contract
//   - Bytes go to the log file (if any) as they arrive; the console (if any) gets only complete
//     lines, each preceded by `console_prefix` (torchrun's "[default0]:" when teeing), written
//     with as few write() calls as possible so lines of different workers never interleave;
//     through `console` (agent/console_sink.h: never blocking the loop) when given, else to
//     `console_fd` directly.
//   - finish() flushes a last line that has no newline (adding one), so nothing is lost when a
//     worker dies mid-line. A line longer than 1 MiB is flushed in pieces.
//   - The last `tail_lines` lines are kept for the failure report.
//   - A log file that cannot be written (a full disk, a quota) costs one line on crun's stderr,
//     "crun: cannot write <file_path>: <reason>; the rest of this log is dropped", and the file is
//     closed; the console and the tail go on.
//   - Owns `file_fd` (closes it); never closes `console_fd`.
//   - `duplicate` (torch's --duplicate-std{out,err}-filters): every console line that contains
//     one of its filters is also written there, with the console prefix, in one write() per
//     batch of lines; one sink is shared by every local rank's router of a group start, and the
//     last router holding it closes it. A failed write costs one line on crun's stderr, as for
//     the log file, and ends the duplication.
//
// Threading
//   Not thread-safe; used on the agent's event-loop thread.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace crun {

class ConsoleCollapser;
class ConsoleSink;

// The file a group's filtered lines go to (attempt_<N>/filtered_std{out,err}.log).
struct DuplicateSink {
  DuplicateSink(int fd, std::vector<std::string> filters, std::string path);
  ~DuplicateSink();  // closes fd
  DuplicateSink(const DuplicateSink&) = delete;
  DuplicateSink& operator=(const DuplicateSink&) = delete;
  bool matches(const char* line, std::size_t size) const;
  int fd;
  std::vector<std::string> filters;  // a line containing any of them is duplicated
  std::string path;
};

struct StreamRoute {
  int console_fd = -1;         // -1: not shown on the console
  std::string console_prefix;  // prepended to every console line
  int file_fd = -1;            // -1: no log file
  std::size_t tail_lines = 0;  // how many last lines to keep
  std::string file_path;       // the log file's name, for the one line about a failed write
  std::shared_ptr<DuplicateSink> duplicate;  // console lines matching its filters also go there
  ConsoleSink* console = nullptr;  // not owned; writes console_fd's lines when set
  ConsoleCollapser* collapse = nullptr;  // not owned; with a console: takes its lines (--collapse-logs)
  int local_rank = 0;                    // whose lines they are, for `collapse`
};

class LineRouter {
 public:
  explicit LineRouter(StreamRoute route);
  ~LineRouter();
  LineRouter(const LineRouter&) = delete;
  LineRouter& operator=(const LineRouter&) = delete;

  void feed(const char* data, std::size_t size);
  void finish();
  const std::deque<std::string>& tail() const { return tail_; }
  ConsoleSink* console() const { return route_.console_fd >= 0 ? route_.console : nullptr; }
  bool collapsing() const { return route_.console_fd >= 0 && route_.collapse != nullptr; }

 private:
  void emit_lines(const char* data, std::size_t size);  // `data` holds whole lines only
  void flush_partial();  // the line without a newline goes out, one added
  void remember(const char* line, std::size_t size);
  void drop_file(int error);

  StreamRoute route_;
  void flush_console();  // writes out_ (console) and dup_ (the duplicate sink)
  std::string partial_;   // bytes after the last newline
  std::string dup_;       // console lines of this batch that match the duplicate's filters
  std::string out_;       // console batch being assembled
  std::deque<std::string> tail_;
};

}  // namespace crun
