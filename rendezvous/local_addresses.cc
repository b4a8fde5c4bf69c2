#include "rendezvous/local_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>

#include <algorithm>

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

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0) continue;
    if (it->ifa_addr->sa_family != AF_INET && it->ifa_addr->sa_family != AF_INET6) continue;
    std::string a = numeric(it->ifa_addr);
    if (!a.empty()) out.push_back(a);
  }
  freeifaddrs(list);
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

}  // namespace crun
