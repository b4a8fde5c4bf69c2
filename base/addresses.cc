#include "base/addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace crun {

namespace {
std::string numeric(const sockaddr* sa) {
  char host[NI_MAXHOST];
  socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  std::string s(host);
  if (auto pct = s.find('%'); pct != std::string::npos) s.erase(pct);  // drop an IPv6 zone id
  return s;
}
}  // namespace

std::vector<InterfaceAddress> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw std::system_error(errno, std::generic_category(), "getifaddrs");
  std::vector<InterfaceAddress> v4, v6;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    const int family = it->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.interface = it->ifa_name;
    a.up = (it->ifa_flags & IFF_UP) != 0;
    a.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&a.address, it->ifa_addr, a.length);
    (family == AF_INET ? v4 : v6).push_back(std::move(a));
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), std::make_move_iterator(v6.begin()), std::make_move_iterator(v6.end()));
  return v4;
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  std::vector<InterfaceAddress> all;
  try {
    all = interface_addresses();
  } catch (const std::system_error&) {
    return out;  // no interface list: nothing is known to be local
  }
  for (const InterfaceAddress& a : all) {
    if (!a.up) continue;
    std::string s = numeric(reinterpret_cast<const sockaddr*>(&a.address));
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::string local_address_of(const std::string& host) {
  std::vector<std::string> mine = local_addresses();
  auto has = [&](const std::string& a) { return std::find(mine.begin(), mine.end(), a) != mine.end(); };
  in6_addr buf;
  if (inet_pton(AF_INET, host.c_str(), &buf) == 1 || inet_pton(AF_INET6, host.c_str(), &buf) == 1) {
    return has(host) ? host : std::string();
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  std::string found;
  for (addrinfo* ai = res; ai != nullptr && found.empty(); ai = ai->ai_next) {
    std::string a = numeric(ai->ai_addr);
    if (has(a)) found = a;
  }
  freeaddrinfo(res);
  return found;
}

bool is_local_host(const std::string& host) { return !local_address_of(host).empty(); }

namespace {

// `addr` (an IP literal; a host name stands for the wildcard address) and `port` as a socket
// address; returns its family.
int socket_address(const std::string& addr, std::uint16_t port, sockaddr_storage& ss, socklen_t& len) {
  ss = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
    return AF_INET6;
  }
  if (::inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) != 1) v4->sin_addr.s_addr = htonl(INADDR_ANY);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  len = sizeof(sockaddr_in);
  return AF_INET;
}

}  // namespace

std::uint16_t pick_free_port(const std::string& addr) {
  sockaddr_storage ss;
  socklen_t len = 0;
  const int family = socket_address(addr, 0, ss, len);
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "bind " + addr + ":0");
  }
  ::close(fd);
  return ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                 : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

}  // namespace crun
