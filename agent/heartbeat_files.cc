#include "agent/heartbeat_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "agent/file_text.h"

namespace crun {

HeartbeatFiles::HeartbeatFiles(int nproc) : fds_(static_cast<std::size_t>(nproc), -1) {}

HeartbeatFiles::~HeartbeatFiles() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

std::string HeartbeatFiles::make(int local_rank, const std::string& path) {
  int& slot = fds_.at(static_cast<std::size_t>(local_rank));
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kHeartbeatFileBytes)) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw std::system_error(err, std::generic_category(), "heartbeat file " + path);
  }
  if (slot >= 0) ::close(slot);
  slot = fd;
  return path;
}

std::optional<Heartbeat> HeartbeatFiles::read(int local_rank) const {
  const int fd = fds_.at(static_cast<std::size_t>(local_rank));
  if (fd < 0) return std::nullopt;
  return read_heartbeat_file(fd);
}

namespace {

const char* state_name(char c) {
  switch (c) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "uninterruptible sleep";
    case 'T': return "stopped";
    case 't': return "stopped by a tracer";
    case 'Z': return "zombie";
    case 'X': return "dead";
    case 'I': return "idle";
    default: return "unknown";
  }
}

}  // namespace

std::string process_state(int pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const auto stat = read_text_file(dir + "/stat");
  if (!stat) return "";
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const auto close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return "";
  const char state = (*stat)[close + 2];
  std::string out = std::string("state ") + state + " (" + state_name(state) + ")";
  if (const auto wchan = read_text_file(dir + "/wchan"); wchan && !wchan->empty() && *wchan != "0") {
    out += ", waiting in " + *wchan;
  }
  return out;
}

}  // namespace crun
