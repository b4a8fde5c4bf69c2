// Fuzzes torch's @record error file as the agent reads it (agent/failure_report.h): the message,
// the traceback, the copy into the launcher's own error file, and the report built from them.
// The file lives in a memfd (/proc/self/fd/N), so nothing touches the disk. None of these may
// throw: an unreadable or malformed file is a "" / a reason. The input's bytes also stand in for
// the worker's last stderr lines, which need not be UTF-8, and for a failure report another node
// published to the rendezvous (FailureReport::from_json): one that parses must survive
// to_json -> from_json unchanged.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/failure_report.h"

namespace {

int worker_fd = -1, parent_fd = -1;

std::string path_of(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  worker_fd = ::memfd_create("worker-error-file", MFD_CLOEXEC);
  parent_fd = ::memfd_create("parent-error-file", MFD_CLOEXEC);
  if (worker_fd < 0 || parent_fd < 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (::ftruncate(worker_fd, 0) != 0) std::abort();
  if (size > 0 && ::pwrite(worker_fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string worker = path_of(worker_fd);

  crun::FailureReport report;
  report.error_file = worker;
  report.error_message = crun::read_error_file_message(worker);
  report.error_traceback = crun::read_error_file_traceback(worker);
  const std::string raw(reinterpret_cast<const char*>(data), size);
  report.stderr_tail = {raw.substr(0, raw.find('\n')), report.error_message};
  const int signo = size > 0 ? data[0] % 65 : 0;
  report.status = signo != 0 ? crun::ExitStatus::killed(signo) : crun::ExitStatus::exited(size > 1 ? data[1] : 1);
  (void)report.format_text();
  (void)report.to_json();

  (void)crun::copy_error_file_to_parent(worker, path_of(parent_fd), report.status);
  // What was copied is read back the way torchrun's parent would read it.
  (void)crun::read_error_file_message(path_of(parent_fd));

  if (auto remote = crun::FailureReport::from_json(raw)) {
    (void)remote->format_text();
    const std::string once = remote->to_json();
    const auto again = crun::FailureReport::from_json(once);
    if (!again || again->to_json() != once) std::abort();
  }
  return 0;
}
