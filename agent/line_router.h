// LineRouter: carries one worker stream (stdout or stderr) to where it belongs, in whole lines.
//
// Contract
//   - Bytes go to the log file (if any) as they arrive; the console (if any) gets only complete
//     lines, each preceded by `console_prefix` (torchrun's "[default0]:" when teeing), written
//     with as few write() calls as possible so lines of different workers never interleave.
//   - finish() flushes a last line that has no newline (adding one), so nothing is lost when a
//     worker dies mid-line. A line longer than 1 MiB is flushed in pieces.
//   - The last `tail_lines` lines are kept for the failure report.
//   - A log file that cannot be written (a full disk, a quota) costs one line on crun's stderr,
//     "crun: cannot write <file_path>: <reason>; the rest of this log is dropped", and the file is
//     closed; the console and the tail go on.
//   - Owns `file_fd` (closes it); never closes `console_fd`.
//
// Threading
//   Not thread-safe; used on the agent's event-loop thread.
#pragma once

#include <cstddef>
#include <deque>
#include <string>

namespace crun {

struct StreamRoute {
  int console_fd = -1;         // -1: not shown on the console
  std::string console_prefix;  // prepended to every console line
  int file_fd = -1;            // -1: no log file
  std::size_t tail_lines = 0;  // how many last lines to keep
  std::string file_path;       // the log file's name, for the one line about a failed write
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

 private:
  void emit_lines(const char* data, std::size_t size);  // `data` holds whole lines only
  void remember(const char* line, std::size_t size);
  void drop_file(int error);

  StreamRoute route_;
  std::string partial_;   // bytes after the last newline
  std::string out_;       // console batch being assembled
  std::deque<std::string> tail_;
};

}  // namespace crun
