// base/addresses: this host's interfaces, local-host detection by address, a free port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "base/addresses.h"

using namespace crun;

TEST_CASE("host detection uses interface addresses, not host names", "[addresses]") {
  CHECK(is_local_host("127.0.0.1"));
  auto mine = local_addresses();
  REQUIRE_FALSE(mine.empty());
  for (auto& a : mine) CHECK(is_local_host(a));
  CHECK_FALSE(is_local_host("192.0.2.77"));  // TEST-NET-1: never assigned to a host
  CHECK(local_address_of("localhost") == "127.0.0.1");  // a name maps to the address to bind
  CHECK(local_address_of("192.0.2.77").empty());
}

TEST_CASE("interface addresses: loopback is listed, up, with its IPv4 address first", "[addresses]") {
  bool seen_lo_v4 = false, seen_v6 = false, v4_after_v6 = false;
  for (const InterfaceAddress& a : interface_addresses()) {
    const int family = a.address.ss_family;
    REQUIRE((family == AF_INET || family == AF_INET6));
    CHECK(a.length == (family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)));
    if (family == AF_INET6) seen_v6 = true;
    if (family == AF_INET && seen_v6) v4_after_v6 = true;
    if (a.interface == "lo" && family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a.address);
      CHECK(in->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
      CHECK(a.up);
      seen_lo_v4 = true;
    }
  }
  CHECK(seen_lo_v4);
  CHECK_FALSE(v4_after_v6);
}

TEST_CASE("pick_free_port returns a port that can be bound at once", "[addresses]") {
  const std::uint16_t port = pick_free_port("127.0.0.1");
  REQUIRE(port != 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  ::close(fd);
  CHECK_THROWS_AS(pick_free_port("192.0.2.77"), std::system_error);  // not an address of this host
}
