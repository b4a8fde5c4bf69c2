// EventLog: torchrun's --event-log-handler, and crun's jsonl:PATH, for the agent's events.
//
// Contract
//   - open(spec): "null" (nothing), "console" (each event a line "crun: event <json>" through
//     base/log.h, as crun's own lines: on the agent's loop its console sink, after what
//     --collapse-logs holds, so events keep their place among the workers' lines),
//     "dynamic_rendezvous" (as console, rendezvous events only: the handler torch gives its
//     rendezvous' events) or "jsonl:PATH" (one JSON object per line appended to PATH, created
//     0644 when missing). Throws std::runtime_error with one line naming PATH when it cannot be
//     opened for writing; the caller does that before anything starts.
//   - emit(kind, fields): one event, a JSON object whose first members are "time" (UTC,
//     microseconds, RFC 3339), "event" (kind) and then `fields` (already a JSON object's text,
//     without braces, or ""). Each line is one write(2) with O_APPEND, so several agents may
//     share a file. The schema: docs/operations.md, "Events".
//   - A write to PATH that fails is reported once on stderr and the handler goes on (events are
//     not worth stopping a job for).
//
// Threading
//   One thread (the agent's event loop).
#pragma once

#include <memory>
#include <string>

namespace crun {

class EventLog {
 public:
  static std::unique_ptr<EventLog> open(const std::string& spec);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void emit(const std::string& kind, const std::string& fields);
  bool is_null() const { return mode_ == Mode::kNull; }

 private:
  enum class Mode { kNull, kConsole, kRendezvousConsole, kFile };
  EventLog(Mode mode, int fd, std::string path) : mode_(mode), fd_(fd), path_(std::move(path)) {}
  Mode mode_;
  int fd_;
  std::string path_;
  bool write_failed_ = false;
};

}  // namespace crun
