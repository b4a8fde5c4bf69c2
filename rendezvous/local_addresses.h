// Which addresses belong to this host: decides whether this agent hosts the rendezvous store.
//
// Contract
//   local_addresses() lists the IPv4/IPv6 addresses of every interface that is up (getifaddrs),
//   loopback included. is_local_host(host) is true when `host` is one of them; an IP literal is
//   compared directly (no DNS), a name is resolved and any of its addresses counts. Hostname
//   comparisons are never used: they fail on multi-NIC hosts and in network namespaces.
//
// Threading
//   Stateless; safe from any thread.
#pragma once

#include <string>
#include <vector>

namespace crun {

std::vector<std::string> local_addresses();
bool is_local_host(const std::string& host);
// The numeric local address `host` stands for (itself for an IP literal, the first of its
// resolved addresses that is local for a name), or "" when it is not this host.
std::string local_address_of(const std::string& host);

}  // namespace crun
