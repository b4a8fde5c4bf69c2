// base/accept_connection: each connection close-on-exec and non-blocking; none pending and out of
// descriptors told apart.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "base/accept_connection.h"

using namespace crun;

namespace {

// A non-blocking listener on 127.0.0.1, port chosen by the kernel; `addr` gets its address.
int listener(sockaddr_in& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(fd >= 0);
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 8) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  return fd;
}

int connect_to(const sockaddr_in& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);  // the backlog takes it
  return fd;
}

}  // namespace

TEST_CASE("a pending connection comes close-on-exec and non-blocking; then none is left", "[accept_connection]") {
  sockaddr_in addr;
  const int lfd = listener(addr);
  CHECK(accept_connection(lfd).outcome == AcceptedConnection::kNoneLeft);
  const int client = connect_to(addr);
  const AcceptedConnection got = accept_connection(lfd);
  REQUIRE(got.outcome == AcceptedConnection::kConnection);
  CHECK((::fcntl(got.fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((::fcntl(got.fd, F_GETFL) & O_NONBLOCK) != 0);
  CHECK(accept_connection(lfd).outcome == AcceptedConnection::kNoneLeft);
  ::close(got.fd);
  ::close(client);
  ::close(lfd);
}

TEST_CASE("out of descriptors is told apart from none pending, and the connection stays pending", "[accept_connection]") {
  sockaddr_in addr;
  const int lfd = listener(addr);
  const int client = connect_to(addr);
  // The lowest free descriptor is the next one; a limit at it leaves accept4 none to use.
  const int probe = ::dup(lfd);
  REQUIRE(probe >= 0);
  ::close(probe);
  rlimit saved;
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(probe);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  const AcceptedConnection starved = accept_connection(lfd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK(starved.outcome == AcceptedConnection::kOutOfDescriptors);
  const AcceptedConnection got = accept_connection(lfd);  // still there
  CHECK(got.outcome == AcceptedConnection::kConnection);
  if (got.fd >= 0) ::close(got.fd);
  ::close(client);
  ::close(lfd);
}
