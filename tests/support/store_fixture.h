// Helpers for the store tests: a raw TCP socket to speak (or mangle) the wire protocol, a
// bounded event queue for watch callbacks, and a server fixture on 127.0.0.1:0.
// Threading: each helper object is used by one test thread, except EventQueue (any thread pushes).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "store/store_client.h"
#include "store/store_protocol.h"
#include "store/store_server.h"
#include "tests/support/eventually.h"

namespace crun::test {

using namespace std::chrono_literals;

inline StoreEndpoint local(const StoreServer& s) { return {"127.0.0.1", s.port()}; }

struct ServerFixture {
  explicit ServerFixture(StoreServerOptions o = {}) : server(std::move(o)) { server.start(); }
  StoreServer server;
  StoreEndpoint endpoint() const { return local(server); }
  std::unique_ptr<TcpStore> client(StoreClientOptions o = {}) { return std::make_unique<TcpStore>(endpoint(), o); }
};

// A plain socket for sending hand-made bytes.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("raw connect failed");
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawSocket() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("raw send failed");
      off += static_cast<std::size_t>(n);
    }
  }
  // Reads exactly n bytes, or returns what came before EOF/timeout.
  std::string recv_n(std::size_t n, std::chrono::milliseconds bound = 5s) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + bound;
    while (out.size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (r <= 0) break;
      out.append(buf, static_cast<std::size_t>(r));
    }
    return out;
  }
  // True when the peer closes (EOF or reset) within the bound; data that arrives first is skipped.
  bool closed_by_peer_within(std::chrono::milliseconds bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return true;
    }
  }
  // The port this end of the connection was given (0 when unknown).
  std::uint16_t local_port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    return ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? ntohs(a.sin_port) : 0;
  }
  // Sends a valid handshake and checks the server's OK.
  bool handshake(const std::string& token = "") {
    send(wire::encode_hello(token));
    std::string reply = recv_n(8);
    if (reply.size() != 8) return false;
    wire::Reader r(reply);
    return r.u32() == wire::kMagic && (r.u16(), r.u16() == 0);
  }

 private:
  int fd_ = -1;
};

// Builds one request frame.
template <typename Fill>
std::string frame(wire::Op op, std::uint32_t id, Fill&& fill) {
  std::string out;
  wire::Writer w(out);
  auto at = w.begin_frame(static_cast<std::uint8_t>(op), id);
  fill(w);
  w.finish_frame(at);
  return out;
}

// A thread-safe queue with bounded waits, for callbacks that arrive on other threads.
template <typename T>
class EventQueue {
 public:
  void push(T v) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(v));
    cv_.notify_all();
  }
  std::optional<T> pop(std::chrono::milliseconds bound = 5s) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, bound, [&] { return !items_.empty(); })) return std::nullopt;
    T v = std::move(items_.front());
    items_.pop_front();
    return v;
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return items_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

}  // namespace crun::test
