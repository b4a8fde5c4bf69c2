#include "base/fd_io.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace crun {

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n == 0) errno = EIO;
    return false;
  }
  return true;
}

bool write_without_blocking(int fd, std::string_view text) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  for (;;) {
    const ssize_t n = ::pwritev2(fd, &iov, 1, -1, RWF_NOWAIT);
    if (n >= 0) return static_cast<std::size_t>(n) == text.size();
    if (errno == EINTR) continue;
    if (errno != EOPNOTSUPP) return false;  // EAGAIN: full; anything else: unusable
    break;
  }
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) return false;
  return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

}  // namespace crun
