#include "base/accept_connection.h"

#include <sys/socket.h>

#include <cerrno>

namespace crun {

AcceptedConnection accept_connection(int listen_fd) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return {AcceptedConnection::kConnection, fd};
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return {AcceptedConnection::kOutOfDescriptors, -1};
    return {AcceptedConnection::kNoneLeft, -1};
  }
}

}  // namespace crun
