#include "base/log.h"

#include <string>

#include "base/fd_io.h"

namespace crun {
namespace {

thread_local LogSink* t_sink = nullptr;
const char* g_program = "crun";

void write_text(std::string_view text) {
  if (t_sink != nullptr) {
    t_sink->write_log(text);
  } else {
    (void)write_all(2, text.data(), text.size());
  }
}

class StderrWithoutBlocking final : public LogSink {
 public:
  void write_log(std::string_view text) override { (void)write_without_blocking(2, text); }
};

}  // namespace

void log_line(std::string_view text) {
  std::string line;
  line.reserve(std::string_view(g_program).size() + 2 + text.size() + 1);
  line.append(g_program).append(": ").append(text).push_back('\n');
  write_text(line);
}

void log_text(std::string_view text) { write_text(text); }

void set_log_program(const char* name) { g_program = name; }

LogSink& stderr_without_blocking() {
  static StderrWithoutBlocking sink;
  return sink;
}

LogRedirect::LogRedirect(LogSink& sink) : previous_(t_sink) { t_sink = &sink; }

LogRedirect::~LogRedirect() { t_sink = previous_; }

}  // namespace crun
