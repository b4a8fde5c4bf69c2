#include "agent/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "base/fd_io.h"
#include "base/log.h"
#include "base/utc_text.h"

namespace crun {

namespace {

// "2026-11-26T02:31:07.123456Z"
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  return utc_text(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count(), 6);
}

bool is_rendezvous_event(const std::string& kind) { return kind.rfind("rendezvous", 0) == 0; }

}  // namespace

std::unique_ptr<EventLog> EventLog::open(const std::string& spec) {
  if (spec.empty() || spec == "null") return std::unique_ptr<EventLog>(new EventLog(Mode::kNull, -1, ""));
  if (spec == "console") return std::unique_ptr<EventLog>(new EventLog(Mode::kConsole, -1, ""));
  if (spec == "dynamic_rendezvous") return std::unique_ptr<EventLog>(new EventLog(Mode::kRendezvousConsole, -1, ""));
  if (spec.rfind("jsonl:", 0) == 0 && spec.size() > 6) {
    const std::string path = spec.substr(6);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("--event-log-handler: cannot write " + path + ": " + std::strerror(errno));
    return std::unique_ptr<EventLog>(new EventLog(Mode::kFile, fd, path));
  }
  throw std::runtime_error("--event-log-handler: expected null, console, dynamic_rendezvous or jsonl:PATH, got '" +
                           spec + "'");
}

EventLog::~EventLog() {
  if (mode_ == Mode::kFile) ::close(fd_);
}

void EventLog::emit(const std::string& kind, const std::string& fields) {
  if (mode_ == Mode::kNull || (mode_ == Mode::kRendezvousConsole && !is_rendezvous_event(kind))) return;
  std::string line = "{\"time\":\"" + utc_now() + "\",\"event\":\"" + kind + "\"";
  if (!fields.empty()) line += "," + fields;
  line += "}";
  if (mode_ != Mode::kFile) {
    log_line("event " + line);  // crun's own console path: held collapsed lines go out first
    return;
  }
  line += "\n";
  if (!write_all(fd_, line.data(), line.size()) && !write_failed_) {
    write_failed_ = true;
    const std::string why = "crun: cannot write the event log " + path_ + ": " + std::strerror(errno) +
                            "; later events may be lost\n";
    (void)write_all(2, why.data(), why.size());
  }
}

}  // namespace crun
