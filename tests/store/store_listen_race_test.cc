// Two agents that host one endpoint at the same moment: both binds succeed (SO_REUSEADDR, nobody
// listens yet) and the second listen() gets EADDRINUSE. This program's listen() lets a rival
// socket bind the server's port and listen first, so the kernel answers the server's own listen()
// exactly so. A program of its own: the listen() it defines is every listen() it makes.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>

#include "store/store.h"
#include "store/store_server.h"

using namespace crun;

namespace {
std::atomic<bool> g_rival_first{false};
int g_rival = -1;
}  // namespace

extern "C" int listen(int fd, int backlog) {
  if (g_rival_first.exchange(false)) {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    g_rival = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(g_rival, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    REQUIRE(::bind(g_rival, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::syscall(SYS_listen, g_rival, 16) == 0);
  }
  return static_cast<int>(::syscall(SYS_listen, fd, backlog));
}

TEST_CASE("a server whose listen() loses its port to another says the address is in use", "[listen_race]") {
  // A port free now (the kernel's pick), then the race on it.
  StoreServerOptions probe;
  probe.host = "127.0.0.1";
  probe.port = 0;
  std::uint16_t port = 0;
  {
    StoreServer s(probe);
    port = s.port();
  }
  StoreServerOptions so = probe;
  so.port = port;
  g_rival_first = true;
  // Not any StoreError: an agent that infers it hosts joins the winner on StoreAddressInUse only.
  CHECK_THROWS_AS(StoreServer(so), StoreAddressInUse);
  CHECK_FALSE(g_rival_first);  // the race did happen
  ::close(g_rival);
  // Without the rival, the port serves.
  CHECK_NOTHROW(StoreServer(so));
}
