#include "store/local_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace crun {

namespace {

// The numeric host a TCP destination names, and whether it is one of this host's own (loopback
// or wildcard: a connect to 0.0.0.0 reaches this host).
bool numeric_local_host(const sockaddr* addr, std::string& host, bool& v6) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    const std::uint32_t a = ntohl(in->sin_addr.s_addr);
    if ((a >> 24) != 127 && a != INADDR_ANY) return false;
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    v6 = false;
  } else if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) && !IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) return false;
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    v6 = true;
  } else {
    return false;
  }
  host = text;
  return true;
}

// The canonical text of a loopback or wildcard host given as text ("0:0::1" -> "::1", the text a
// client derives from the address it resolved), or "" for any other host.
std::string canonical_local_host(const std::string& host) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
  } else if (::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
  } else {
    return {};
  }
  std::string numeric;
  bool v6 = false;
  return numeric_local_host(reinterpret_cast<const sockaddr*>(&ss), numeric, v6) ? numeric : std::string();
}

socklen_t address_of(const std::string& name, sockaddr_un& un) {
  un = sockaddr_un{};
  un.sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof un.sun_path);
  std::memcpy(un.sun_path, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
}

// One non-blocking attempt; the fd when a listener of this user or root took it.
int try_name(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_un un{};
  const socklen_t len = address_of(name, un);
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&un), len) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 ||
      (peer.uid != ::geteuid() && peer.uid != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string local_socket_name(const std::string& host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(1, '\0') + "crun-store/" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int listen_local(const std::string& host, std::uint16_t port) {
  const std::string canonical = canonical_local_host(host);
  if (canonical.empty()) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_un un{};
  const socklen_t len = address_of(local_socket_name(canonical, port), un);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&un), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_local(const sockaddr* addr, socklen_t len, std::string& local_ip) {
  std::string host;
  bool v6 = false;
  if (len < static_cast<socklen_t>(sizeof(sa_family_t)) || !numeric_local_host(addr, host, v6)) return -1;
  const std::uint16_t port = ntohs(v6 ? reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port
                                      : reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  const std::string wildcard = v6 ? "::" : "0.0.0.0";
  int fd = try_name(local_socket_name(host, port));
  if (fd < 0 && host != wildcard) fd = try_name(local_socket_name(wildcard, port));
  if (fd < 0) return -1;
  local_ip = v6 ? "::1" : "127.0.0.1";  // the source address the kernel gives TCP to any of them
  return fd;
}

}  // namespace crun
