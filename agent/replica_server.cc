#include "agent/replica_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <system_error>

#include "base/accept_connection.h"
#include "base/log.h"

namespace crun {

namespace asio = boost::asio;
using asio::ip::tcp;

bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct ReplicaServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, ReplicaServerOptions o, ReplicaStore& s, SetSource src)
      : io(io), acceptor(io), retry(io), options(std::move(o)), store(s), own(std::move(src)) {}

  // Each connection close-on-exec (base/accept_connection.h): no worker the agent spawns
  // meanwhile may inherit one.
  void accept() {
    acceptor.async_wait(tcp::acceptor::wait_read, [weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || !self->acceptor.is_open() || ec == asio::error::operation_aborted) return;
      for (int i = 0; i < 64; ++i) {
        const AcceptedConnection accepted = accept_connection(self->acceptor.native_handle());
        if (accepted.outcome == AcceptedConnection::kOutOfDescriptors) {
          // Try again a little later rather than spin on a readable listener.
          self->retry.expires_after(std::chrono::milliseconds(100));
          self->retry.async_wait([weak](boost::system::error_code e) {
            if (auto again = weak.lock(); again && !e && again->acceptor.is_open()) again->accept();
          });
          return;
        }
        if (accepted.outcome == AcceptedConnection::kNoneLeft) break;
        const int fd = accepted.fd;
        tcp::socket socket(self->io);
        boost::system::error_code aec;
        socket.assign(self->acceptor.local_endpoint().protocol(), fd, aec);
        if (aec) {
          ::close(fd);
          continue;
        }
        self->take(std::move(socket));
      }
      self->accept();
    });
  }

  void take(tcp::socket socket) {
    boost::system::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    const std::string peer = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
    if (static_cast<int>(links.size()) >= options.max_connections) {
      log_line("state replication: refused a connection from " + peer + ": already " +
               std::to_string(options.max_connections) + " connections");
      socket.close(ec);
      return;
    }
    ReplicaLinkHandlers h;
    auto weak = weak_from_this();
    auto link_slot = std::make_shared<std::weak_ptr<ReplicaLink>>();
    h.on_hello = [this, peer](std::string_view token) {
      if (options.token.empty() || same_secret(token, options.token)) return true;
      log_line("state replication: refused " + peer + ": wrong token");
      return false;
    };
    h.on_query = [this, link_slot](int rank) {
      if (auto l = link_slot->lock()) l->send(replica::encode_have(rank, newest_sequence(rank)));
    };
    h.on_get = [this, link_slot](int rank) {
      auto l = link_slot->lock();
      if (!l) return;
      auto set = newest_set(rank);
      if (set) l->send_set(std::move(*set));
      else l->send(replica::encode_have(rank, 0));
    };
    h.on_set = [this, link_slot](ReceivedSet& set) {
      store.keep(set);
      if (auto l = link_slot->lock()) l->send(replica::encode_ack(set.rank, set.sequence));
    };
    h.on_closed = [weak, link_slot, peer](const std::string& why) {
      auto self = weak.lock();
      if (!self) return;
      if (why != "refused" && !why.empty() && why != "the peer closed the connection") {
        log_line("state replication: closed the connection from " + peer + ": " + why);
      }
      self->links.erase(link_slot->lock());
    };
    const int fd = socket.release(ec);
    if (ec) return;
    auto link = make_replica_link(io, fd, replica::ReplicaDecoder::Side::kServer, options.max_set_bytes, store.root(),
                                  std::move(h));
    *link_slot = link;
    links.insert(link);
    link->start();
  }

  std::uint64_t newest_sequence(int rank) const {
    std::uint64_t s = own.sequence ? own.sequence(rank) : 0;
    if (auto held = store.newest(rank); held && held->sequence > s) s = held->sequence;
    return s;
  }

  std::optional<OutgoingSet> newest_set(int rank) const {
    const std::uint64_t mine = own.sequence ? own.sequence(rank) : 0;
    auto held = store.newest(rank);
    if (held && held->sequence > mine) return store.snapshot(rank);
    if (mine > 0 && own.snapshot) return own.snapshot(rank);
    return std::nullopt;
  }

  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // accept again after running out of descriptors
  ReplicaServerOptions options;
  ReplicaStore& store;
  SetSource own;
  std::set<std::shared_ptr<ReplicaLink>> links;
};

int listen_tcp(const std::string& address, std::uint16_t& port) {
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address.empty() ? "0.0.0.0" : address, ec);
  if (ec) throw std::system_error(EINVAL, std::generic_category(), "not an IP address: " + address);
  const int fd = ::socket(ip.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  const tcp::endpoint ep(ip, 0);
  if (::bind(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0 || ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "cannot listen on " + address);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

namespace {
int listening(const std::string& address) {
  std::uint16_t port = 0;
  return listen_tcp(address, port);
}
}  // namespace

ReplicaServer::ReplicaServer(asio::io_context& io, const std::string& address, ReplicaServerOptions options,
                             ReplicaStore& store, SetSource own)
    : ReplicaServer(io, listening(address), std::move(options), store, std::move(own)) {}

ReplicaServer::ReplicaServer(asio::io_context& io, int listening_fd, ReplicaServerOptions options, ReplicaStore& store,
                             SetSource own)
    : impl_(std::make_shared<Impl>(io, std::move(options), store, std::move(own))) {
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listening_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  boost::system::error_code ec;
  impl_->acceptor.assign(bound.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), listening_fd, ec);
  if (ec) {
    ::close(listening_fd);
    throw std::system_error(ec.value(), std::generic_category(), "cannot take the replication endpoint");
  }
  impl_->accept();
}

ReplicaServer::~ReplicaServer() {
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  auto links = std::move(impl_->links);
  for (const auto& l : links) l->close();
}

std::uint16_t ReplicaServer::port() const { return impl_->acceptor.local_endpoint().port(); }
int ReplicaServer::connections() const { return static_cast<int>(impl_->links.size()); }

}  // namespace crun
