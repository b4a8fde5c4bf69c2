// LoopbackSocket: a TCP socket on 127.0.0.1 at a port the kernel chose, for tests that play a
// peer by hand: bound only (a port that refuses connections while the object lives) or listening
// (accept on `fd`). Throws std::runtime_error when it cannot be made; closed with the object.
// Threading: one test thread (another may accept on `fd` while the object lives).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

namespace crun::test {

struct LoopbackSocket {
  enum class Mode { kBound, kListening };
  explicit LoopbackSocket(Mode mode) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        (mode == Mode::kListening && ::listen(fd, 16) != 0) ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("cannot make a loopback socket");
    }
    port = ntohs(a.sin_port);
  }
  ~LoopbackSocket() { ::close(fd); }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  int fd = -1;
  std::uint16_t port = 0;
};

}  // namespace crun::test
