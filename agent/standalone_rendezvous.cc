#include "agent/standalone_rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "rendezvous/store_server.h"

namespace crun {

std::uint16_t pick_free_port(const std::string& addr) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {  // a host name: any local address will do for finding a free port
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "bind " + addr + ":0");
  }
  ::close(fd);
  return ntohs(family == AF_INET ? v4->sin_port : v6->sin6_port);
}

StandaloneRendezvous::StandaloneRendezvous(boost::asio::io_context& io, int nproc,
                                           std::string master_addr,
                                           std::optional<std::uint16_t> master_port)
    : nproc_(nproc), master_addr_(std::move(master_addr)), master_port_(master_port) {
  StoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  store_ = std::make_unique<StoreServer>(io, options);
}

StandaloneRendezvous::~StandaloneRendezvous() = default;

RoundInfo StandaloneRendezvous::next_round(int restart_count) {
  RoundInfo r;
  r.round = restart_count;
  r.group_rank = 0;
  r.group_world_size = 1;
  r.rank_offset = 0;
  r.world_size = nproc_;
  r.master_addr = master_addr_;
  r.master_port = master_port_ ? *master_port_ : pick_free_port(master_addr_);
  r.store_prefix = "/crun/round/" + std::to_string(restart_count) + "/";
  return r;
}

void StandaloneRendezvous::shutdown() {
  if (store_) store_->stop();
}


}  // namespace crun
