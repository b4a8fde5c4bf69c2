// Addresses of this host: its interfaces, whether a host name or address is this host, and a port
// nobody listens on. The one place crun walks getifaddrs.
//
// Contract
//   - interface_addresses() lists every IPv4/IPv6 address of every interface (getifaddrs), with the
//     interface's name and whether it is up; IPv4 before IPv6, each in the kernel's order.
//   - local_addresses() lists the numeric addresses of the interfaces that are up, loopback
//     included (no IPv6 zone id).
//   - local_address_of(host): the numeric local address `host` stands for (itself for an IP
//     literal, the first of its resolved addresses that is local for a name), or "" when it is not
//     this host. is_local_host(host) is true when there is one. Hostname comparisons are never
//     used: they fail on multi-NIC hosts and in network namespaces.
//   - pick_free_port(addr): a TCP port on `addr` that nobody listens on right now (bind port 0,
//     read it, close; a name binds the wildcard address). Throws std::system_error when no socket
//     can be bound.
//
// Threading
//   Stateless; safe from any thread.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace crun {

struct InterfaceAddress {
  std::string interface;  // e.g. "eth0", "lo"
  bool up = false;
  sockaddr_storage address{};
  socklen_t length = 0;  // of `address`: sizeof(sockaddr_in) or sizeof(sockaddr_in6)
};

// Throws std::system_error when getifaddrs fails.
std::vector<InterfaceAddress> interface_addresses();

std::vector<std::string> local_addresses();
bool is_local_host(const std::string& host);
std::string local_address_of(const std::string& host);

std::uint16_t pick_free_port(const std::string& addr);

}  // namespace crun
