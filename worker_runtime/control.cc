#include "worker_runtime/control.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

#include "base/control_requests.h"

namespace crun::rt {

namespace {

// The line the agent reads: verb, space, reason with its control characters made spaces, cut at
// the start of a UTF-8 character so that the line (without its newline) fits the agent's bound.
std::string request_line(std::string_view verb, std::string_view reason) {
  std::string line(verb);
  line += ' ';
  for (char c : reason) {
    const auto u = static_cast<unsigned char>(c);
    line += u < 0x20 || u == 0x7F ? ' ' : c;
  }
  if (line.size() > crun::kControlLineMaxBytes) {
    std::size_t end = crun::kControlLineMaxBytes;
    while (end > verb.size() && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
    line.resize(end);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line += '\n';
  return line;
}

bool append_request(std::string_view verb, std::string_view reason) {
  const char* path = std::getenv("CRUN_CONTROL_FILE");
  if (path == nullptr || *path == '\0') return false;
  const std::string line = request_line(verb, reason);
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), std::string("cannot open CRUN_CONTROL_FILE ") + path);
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n < 0) throw std::system_error(err, std::generic_category(), std::string("cannot write CRUN_CONTROL_FILE ") + path);
  if (static_cast<std::size_t>(n) != line.size()) {
    throw std::system_error(EIO, std::generic_category(), std::string("short write to CRUN_CONTROL_FILE ") + path);
  }
  return true;
}

}  // namespace

bool request_exclude_node(std::string_view reason) { return append_request(crun::kControlExcludeNode, reason); }
bool request_stop_job(std::string_view reason) { return append_request(crun::kControlStopJob, reason); }

}  // namespace crun::rt
