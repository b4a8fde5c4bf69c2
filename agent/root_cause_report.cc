#include "agent/root_cause_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd_io.h"

namespace crun {

FailureReport assemble_failure_report(const WorkerExit& exit, RootCauseFacts facts) {
  FailureReport r;
  r.role = std::move(facts.role);
  r.restart_count = exit.restart_count;
  r.rank = facts.rank_offset + exit.local_rank;
  r.local_rank = exit.local_rank;
  r.host = std::move(facts.host);
  r.addr = std::move(facts.addr);
  r.pid = exit.pid;
  r.status = exit.status;
  r.time = exit.wall_time;
  r.error_file = std::move(facts.error_file);
  r.error_message = read_error_file_message(r.error_file);
  r.error_traceback = read_error_file_traceback(r.error_file);
  r.stderr_tail = std::move(facts.stderr_tail);
  r.watchdog = std::move(facts.watchdog);
  r.request = std::move(facts.request);
  return r;
}

std::string write_failure_report(const FailureReport& report, const std::string& path) {
  const std::string json = report.to_json();
  // Written beside and renamed over: node rank 0 rewrites it as other nodes' stacks arrive, and a
  // reader never sees it half written. A failure names the report, not its temporary copy.
  const std::string temp = path + ".new";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write " + path + ": " + std::strerror(errno);
  std::string why;
  if (!write_all(fd, json.data(), json.size())) why = "cannot write " + path + ": " + std::strerror(errno);
  ::close(fd);
  if (why.empty() && ::rename(temp.c_str(), path.c_str()) != 0) why = "cannot rename " + temp + " to " + path + ": " + std::strerror(errno);
  if (!why.empty()) ::unlink(temp.c_str());
  return why;
}

}  // namespace crun
