#include "base/heartbeat_file.h"

#include <unistd.h>

#include <cstring>

namespace crun {

std::optional<Heartbeat> read_heartbeat_file(int fd) {
  unsigned char bytes[kHeartbeatFileBytes];
  if (::pread(fd, bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) return std::nullopt;
  Heartbeat h;
  std::memcpy(&h.step, bytes, 8);
  std::memcpy(&h.monotonic_ns, bytes + 8, 8);
  return h;
}

}  // namespace crun
