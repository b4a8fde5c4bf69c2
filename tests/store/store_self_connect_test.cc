// A client that connects to a port nobody listens on yet can be handed that very port as its own
// (the port is in the ephemeral range, as a free port picked by the kernel is): TCP's simultaneous
// open then connects the socket to itself. The client must take that for "nobody listens", not
// for a server, or it reads its own requests back, and it holds the port the server is about to
// bind. A program of its own: it moves into a network namespace of its own (root; CI is root),
// whose ephemeral range it narrows to the one port.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "store/store.h"
#include "store/store_client.h"
#include "store/store_connection.h"
#include "store/store_server.h"

using namespace crun;

namespace {

void write_proc(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
}

// This process in a network namespace of its own, its loopback up.
void own_network_namespace() {
  INFO("unshare(CLONE_NEWNET) needs root: " << std::strerror(errno));
  REQUIRE(::unshare(CLONE_NEWNET) == 0);
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  REQUIRE(::ioctl(s, SIOCGIFFLAGS, &ifr) == 0);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  REQUIRE(::ioctl(s, SIOCSIFFLAGS, &ifr) == 0);
  ::close(s);
}

}  // namespace

TEST_CASE("a client handed the server's port as its own is not connected to itself", "[self_connect]") {
  own_network_namespace();
  const std::uint16_t port = 40000;
  // The only ephemeral port is the endpoint's: every connect() to it from this host comes from it.
  write_proc("/proc/sys/net/ipv4/ip_local_port_range", std::to_string(port) + " " + std::to_string(port));

  StoreClientOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  const StoreEndpoint endpoint{"127.0.0.1", port};
  try {
    StoreConnection connection(endpoint, options);
    FAIL("connected to " << endpoint.str() << " with nobody listening (to itself)");
  } catch (const StoreConnectionError& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot connect") && Catch::Contains("nobody listens"));
  }

  // The port was not kept: a server binds it, and a client (other ephemeral ports now) reaches it.
  write_proc("/proc/sys/net/ipv4/ip_local_port_range", "41000 41999");
  StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  StoreServer server(so);
  server.start();
  TcpStore store(endpoint, options);
  store.set("k", "v");
  CHECK(store.get("k", Millis(1000)) == "v");
}
