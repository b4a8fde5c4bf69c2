#include "store/store_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <optional>
#include <thread>
#include <unordered_set>

#include "base/fd_io.h"
#include "base/log.h"
#include "base/open_files.h"
#include "base/quiet_thread.h"
#include "store/local_socket.h"
#include "store/log_throttle.h"
#include "store/reply_budget.h"
#include "store/reply_queue.h"
#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_protocol.h"
#include "store/store_session.h"

namespace crun {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
constexpr std::size_t kMaxReadPerWake = 1u << 20;  // then other connections get a turn
constexpr int kMaxAcceptsPerWake = 256;
// Descriptors the process needs beside its connections (the agent's pipes, files, its own
// store clients) when the open-files limit is sized for max_connections.
constexpr std::uint64_t kSpareDescriptors = 256;

// "address:port" of the peer accept4 reported (no system call).
std::string peer_name(const sockaddr_storage& peer, socklen_t len) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (len == 0 || ::getnameinfo(reinterpret_cast<const sockaddr*>(&peer), len, host, sizeof host, port, sizeof port,
                                NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return std::string(host) + ":" + port;
}

// What every connection's socket gets: no Nagle delay, and keepalive probes that notice a
// vanished peer within ~45 s. Set on the listener, a connection inherits them from it (Linux
// copies the listener's socket into each one it accepts); set again per connection only where it
// did not (Impl::options_inherited).
void set_connection_options(int fd) {
  const int one = 1, idle = 30, interval = 5, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// Whether an accepted socket carries set_connection_options' settings.
bool has_connection_options(int fd) {
  int nodelay = 0, keepalive = 0, count = 0;
  socklen_t len = sizeof(int);
  ::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len);
  len = sizeof(int);
  ::getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len);
  len = sizeof(int);
  ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, &len);
  return nodelay != 0 && keepalive != 0 && count == 3;
}
}  // namespace

class Connection;

struct StoreServer::Impl {
  Impl(asio::io_context& io_ref, StoreServerOptions o)
      : io(io_ref),
        opt(std::move(o)),
        acceptor(io),
        limits{opt.token, opt.max_pending_per_connection, opt.max_outbound_bytes},
        replies(opt.max_queued_reply_bytes) {}

  void open();
  void accept();
  void accept_local();
  // Takes what waits on `listener` (TCP, or the local socket when `local`).
  void on_acceptable(int listener, bool local);
  void refuse_full(int fd);
  void close_all();
  // One line about a connection; throttled per kind, never blocking the loop.
  void log(std::string_view kind, const std::string& line);

  std::unique_ptr<asio::io_context> owned_io;
  asio::io_context& io;
  StoreServerOptions opt;
  tcp::acceptor acceptor;
  asio::posix::stream_descriptor local_listener{io};  // not open: no local socket (store/local_socket.h)
  SessionLimits limits;
  ReplyBudget replies;  // before `connections`: their queues are counted in it
  KeySpace keys;
  LogThrottle throttle;
  std::unordered_set<std::shared_ptr<Connection>> connections;
  // While one connection's batch of requests is decoded, what they queue on other connections
  // (watch notifications, answers to parked gets) waits here and is written once the batch is
  // done: one write per connection per batch, not one per notification.
  bool decoding_batch = false;
  std::vector<std::shared_ptr<Connection>> flush_after_batch;
  std::uint64_t next_serial = 0;
  std::thread thread;
  std::atomic<std::uint16_t> bound_port{0};
  std::string bound_host;
  std::atomic<bool> stopped{false};
  StoreServerStats stats;
  std::optional<bool> options_inherited;  // learnt from the first TCP connection accepted
};

// One client connection's I/O on the server's io_context: waits for input (async_wait, then
// its own recv()s into its StoreSession), writes what the session queues, and keeps the
// handshake/frame and parked-request timers. Owns its socket. Lives on the server thread.
class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(StoreServer::Impl& server, std::string peer, bool local)
      : server_(server),
        local_(local),
        socket_(server.io),
        io_timer_(server.io),
        deadline_timer_(server.io),
        peer_(std::move(peer)),
        session_(server.keys, server.limits, ++server.next_serial, [this] { on_output(); }, &server.replies),
        out_(&server.replies) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Takes `fd` (accepted non-blocking) into the io_context and starts waiting for the handshake;
  // a socket the io_context cannot watch is closed at once.
  void start(int fd) {
    boost::system::error_code ec;
    socket_.assign(fd, ec);
    if (ec) {
      ::close(fd);
      return close("cannot watch the connection: " + ec.message(), true);
    }
    if (!local_) {  // a local socket has no TCP options
      if (!server_.options_inherited) server_.options_inherited = has_connection_options(fd);
      if (!*server_.options_inherited) set_connection_options(fd);
    }
    arm_io_timer(server_.opt.handshake_timeout, "handshake not completed");
    wait_for_input();
  }

  // Closes the socket and takes the session's parked requests, watches and ephemeral keys out of
  // the keyspace. Never called from inside a KeySpace callback (those post a close instead).
  void close(const std::string& reason, bool fault) {
    if (closed_) return;
    closed_ = true;
    if (fault) {
      ++server_.stats.connections_dropped;
      const std::string protocol = session_.protocol();
      server_.log("dropped", "dropped connection from " + peer_ + (protocol.empty() || protocol == "crun" ? "" : " (" + protocol + ")") +
                                 ": " + reason);
    } else if (server_.opt.log_closes) {
      server_.log("closed", "connection from " + peer_ + " closed: " + reason);
    }
    out_.clear();  // its replies in flight go back now, not when the last handler lets go
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
    boost::system::error_code ec;
    socket_.close(ec);  // its waits end with operation_aborted
    io_timer_.cancel();
    deadline_timer_.cancel();
    session_.detach();
    server_.connections.erase(shared_from_this());
  }

  std::size_t parked_count() const { return session_.parked(); }
  std::size_t input_buffer_bytes() const { return session_.buffer_capacity(); }

 private:
  int fd() { return socket_.native_handle(); }

  // The reactor wakes this connection when its socket has input (or an error, or the peer's end).
  // A wait, not async_read_some: a read needs its buffer while it waits, and an idle connection
  // holds none (store_session.h). Either costs one system call a request beside the recv() and
  // the send() (Boost 1.81: a wait re-arms the socket with epoll_ctl(); a read first tries a
  // recv(), which for a request/reply client mostly finds nothing yet).
  void wait_for_input() {
    socket_.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_ || self->close_posted_ || self->session_.ended()) return;
      self->read_input();
    });
  }

  // Reads what the socket holds into the session, straight into the room it offers, until a
  // read comes back short (the socket is empty, so the reactor reports the next input), the
  // session ends, or kMaxReadPerWake was read (the rest is read after the other handlers had a
  // turn). What the batch's requests queue for other connections is written once it is decoded.
  void read_input() {
    const auto now = std::chrono::steady_clock::now();
    const std::size_t before = session_.buffered();
    std::size_t total = 0;
    bool more = false, gone = false;
    int error = 0;
    in_batch_ = true;
    server_.decoding_batch = true;
    while (!session_.ended()) {
      const std::span<char> space = session_.input_space();
      const ssize_t n = ::recv(fd(), space.data(), space.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        session_.received(0, now);  // nothing after all: an idle session gives its room back
        break;
      }
      if (n <= 0) {  // the peer closed (0), or the connection failed
        gone = true;
        error = n < 0 ? errno : 0;
        break;
      }
      session_.received(static_cast<std::size_t>(n), now);
      server_.stats.bytes_received += static_cast<std::size_t>(n);
      total += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < space.size()) break;  // the socket is empty
      if (total >= kMaxReadPerWake) {
        more = true;
        break;
      }
    }
    in_batch_ = false;
    flush_others();
    if (session_.ended()) return end_session();  // its own end comes first, also when the peer left
    if (gone) {
      const bool partial = session_.buffered() != 0 || !session_.handshaken();
      return close(error == 0 ? (partial ? "peer closed mid-request" : "peer closed") : std::strerror(error),
                   error == 0 && partial && session_.handshaken());
    }
    update_io_timer(session_.buffered() != before || total != 0);
    update_deadline_timer();
    flush();
    if (closed_ || close_posted_) return;
    if (!more) return wait_for_input();
    asio::post(server_.io, [self = shared_from_this()] {
      if (!self->closed_ && !self->close_posted_ && !self->session_.ended()) self->read_input();
    });
  }

  // The session ended itself: flush its last words if it has any (a refused handshake), close.
  void end_session() {
    if (session_.flush_before_close()) {
      close_after_write_ = true;
      flush();
      return;
    }
    close(session_.end_reason(), session_.fault());
  }

  // Before the handshake one timer bounds the whole handshake; after it, a frame started must
  // keep making progress: re-armed on every read that brought bytes, cancelled when none are
  // buffered. A slow sender is fine, a silent one is not.
  void update_io_timer(bool progressed) {
    if (!session_.handshaken()) return;
    if (session_.buffered() != 0) {
      if (progressed || !io_timer_armed_) arm_io_timer(server_.opt.frame_timeout, "no bytes of an incomplete frame");
    } else if (io_timer_armed_) {
      io_timer_armed_ = false;
      io_timer_.cancel();
    }
  }

  void arm_io_timer(std::chrono::milliseconds after, const char* what) {
    io_timer_armed_ = true;
    io_timer_.expires_after(after);
    io_timer_.async_wait([self = shared_from_this(), what, after](boost::system::error_code ec) {
      if (ec || !self->io_timer_armed_ || self->closed_) return;
      // A connection that never sent a byte is idle, not faulty: torch 1.x opens a second,
      // silent connection per TCPStore (for watch_key) and carries on without it.
      const bool silent = !self->session_.handshaken() && self->session_.buffered() == 0;
      self->close(std::string(silent ? "no byte" : what) + " within " + std::to_string(after.count()) + " ms", !silent);
    });
  }

  // One timer for the earliest deadline of the session's parked requests.
  void update_deadline_timer() {
    const auto next = session_.next_deadline();
    if (!next || (deadline_armed_ && *next == armed_deadline_)) return;
    deadline_armed_ = true;
    armed_deadline_ = *next;
    deadline_timer_.expires_at(*next);
    deadline_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_) return;
      self->deadline_armed_ = false;
      self->session_.expire(std::chrono::steady_clock::now());
      if (self->session_.ended()) return self->end_session();
      self->update_deadline_timer();
      self->flush();
    });
  }

  // Output queued by another connection's request, from inside a KeySpace callback: written once
  // that connection's batch is decoded (a blocked get's answer should not wait longer), or now
  // when no batch is being decoded; any closing is left to a handler of our own (read_input()'s,
  // in a batch of this connection's). A session that ended (the reply bound evicted it, maybe from
  // inside this connection's batch) lets go of its bytes in flight at once.
  void on_output() {
    if (closed_) return;
    if (session_.ended()) {
      if (!session_.flush_before_close()) drop_output();
      if (!in_batch_) post_close(session_.end_reason(), session_.fault());
      return;
    }
    if (in_batch_) return;
    if (server_.decoding_batch) {
      if (!flush_pending_) {
        flush_pending_ = true;
        server_.flush_after_batch.push_back(shared_from_this());
      }
      return;
    }
    flush();
  }

  // The batch that was decoded is done: write what it queued on other connections.
  void flush_others() {
    server_.decoding_batch = false;
    auto pending = std::move(server_.flush_after_batch);
    server_.flush_after_batch.clear();
    for (auto& c : pending) {
      c->flush_pending_ = false;
      c->flush();
    }
  }

  void post_close(std::string reason, bool fault) {
    if (close_posted_ || closed_) return;
    close_posted_ = true;
    asio::post(server_.io, [self = shared_from_this(), reason = std::move(reason), fault] { self->close(reason, fault); });
  }

  // Never called from inside flush() or write_rest() (no eviction runs there).
  void drop_output() {
    out_.clear();
    out_sent_ = 0;
    writing_ = false;  // a wait for room still pending finds nothing to write
    session_.set_in_flight(0, 0);
  }

  // out_ from `from` on, in one call: send() while it holds copied bytes only, else sendmsg()
  // gathering copied bytes and shared values.
  ssize_t send_from(std::size_t from) {
    constexpr int flags = MSG_NOSIGNAL | MSG_DONTWAIT;
    if (!out_.has_shared()) return ::send(fd(), out_.text().data() + from, out_.size() - from, flags);
    std::array<iovec, 64> iov;
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = out_.gather(from, iov.data(), iov.size());
    return ::sendmsg(fd(), &msg, flags);
  }

  // Writes everything queued: inline while the socket takes it, the rest once it has room
  // (order is kept: nothing new is written while a write waits for room).
  void flush() {
    if (closed_ || writing_ || close_posted_) return;
    session_.take_output(out_);
    if (out_.empty()) {
      if (close_after_write_) close(session_.end_reason(), session_.fault());
      return;
    }
    const ssize_t n = send_from(0);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      post_close(std::string("write failed: ") + std::strerror(errno), false);
      return;
    }
    const std::size_t sent = n > 0 ? static_cast<std::size_t>(n) : 0;
    if (sent == out_.size()) {
      out_.clear();
      if (close_after_write_) close(session_.end_reason(), session_.fault());
      return;
    }
    writing_ = true;
    out_sent_ = sent;
    session_.set_in_flight(out_.size() - sent, out_.text_size());
    wait_for_room();
  }

  void wait_for_room() {
    if (waiting_for_room_) return;  // one wait at a time, also across drop_output()
    waiting_for_room_ = true;
    socket_.async_wait(asio::posix::stream_descriptor::wait_write, [self = shared_from_this()](boost::system::error_code ec) {
      self->waiting_for_room_ = false;
      if (ec || self->closed_ || !self->writing_) return;
      self->write_rest();
    });
  }

  // The socket took part of out_ and has room again (or failed): the rest, then what the session
  // queued meanwhile.
  void write_rest() {
    while (out_sent_ < out_.size()) {
      const ssize_t n = send_from(out_sent_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return wait_for_room();
      if (n < 0) return close(std::string("write failed: ") + std::strerror(errno), false);
      out_sent_ += static_cast<std::size_t>(n);
    }
    writing_ = false;
    out_.clear();
    out_sent_ = 0;
    session_.set_in_flight(0, 0);
    if (session_.ended() && !close_after_write_) return end_session();
    flush();
  }

  StoreServer::Impl& server_;
  const bool local_;  // the store's local socket, not TCP
  asio::posix::stream_descriptor socket_;  // closed once the connection is
  asio::steady_timer io_timer_;
  asio::steady_timer deadline_timer_;
  bool io_timer_armed_ = false;
  bool deadline_armed_ = false;
  std::chrono::steady_clock::time_point armed_deadline_{};
  std::string peer_;
  StoreSession session_;
  ReplyQueue out_;  // bytes handed to the socket, in flight while writing_
  std::size_t out_sent_ = 0;  // of out_, while writing_
  bool closed_ = false;
  bool close_posted_ = false;
  bool in_batch_ = false;
  bool flush_pending_ = false;  // in server_.flush_after_batch
  bool writing_ = false;
  bool waiting_for_room_ = false;  // a wait_write is pending
  bool close_after_write_ = false;
};

void StoreServer::Impl::open() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(opt.host, ec);
  if (ec) throw StoreError("store server: '" + opt.host + "' is not an IP address");
  tcp::endpoint ep(address, opt.port);
  // Close-on-exec from the start: workers and their children must never hold the store's port.
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw StoreError(std::string("store server: socket: ") + std::strerror(errno));
  acceptor.assign(ep.protocol(), fd);
  acceptor.set_option(asio::socket_base::reuse_address(true));
  set_connection_options(fd);
  acceptor.bind(ep, ec);
  // listen() fails with EADDRINUSE too: two sockets with SO_REUSEADDR bind one port while neither
  // listens (several agents on one endpoint, started at once), and the second to listen loses.
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string what = "store server: cannot listen on " + opt.host + ":" + std::to_string(opt.port) + ": " + ec.message();
    if (ec == asio::error::address_in_use) throw StoreAddressInUse(what);
    throw StoreError(what);
  }
  // One descriptor per connection: the soft open-files limit goes up as far as the hard limit
  // lets it (workers get the old one back, agent/worker_process.cc); short of max_connections,
  // one line says how many fit.
  const std::uint64_t wanted = opt.max_connections + kSpareDescriptors;
  const OpenFilesLimit files = raise_open_files_limit(wanted);
  if (files.now < wanted) {
    log("limit", "store server: the open-files limit (soft " + std::to_string(files.now) + ", hard " +
                     std::to_string(files.hard) + ") holds about " +
                     std::to_string(files.now > kSpareDescriptors ? files.now - kSpareDescriptors : 0) + " of the " +
                     std::to_string(opt.max_connections) +
                     " connections allowed (--max-connections); raise the hard limit (ulimit -Hn) for more");
  }
  bound_port = acceptor.local_endpoint().port();
  bound_host = opt.host;
  accept();
  if (const int local = opt.local_socket ? listen_local(opt.host, bound_port) : -1; local >= 0) {
    local_listener.assign(local);
    accept_local();
  }
}

void StoreServer::Impl::accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    on_acceptable(acceptor.native_handle(), false);
    accept();
  });
}

void StoreServer::Impl::accept_local() {
  local_listener.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted || !local_listener.is_open()) return;
    on_acceptable(local_listener.native_handle(), true);
    accept_local();
  });
}

// Takes every connection waiting (bounded per wake), each close-on-exec and non-blocking from
// accept4 on, so no exec elsewhere in the process can inherit one.
void StoreServer::Impl::on_acceptable(int listener, bool local) {
  for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        log("accept", std::string("accept failed: ") + std::strerror(errno) + " (raise the open-files limit)");
      }
      return;  // EAGAIN: none left
    }
    ++stats.connections_accepted;
    if (local) ++stats.local_connections_accepted;
    if (connections.size() >= opt.max_connections) {
      refuse_full(fd);
      continue;
    }
    auto conn = std::make_shared<Connection>(*this, local ? "a local socket" : peer_name(peer, peer_len), local);
    connections.insert(conn);
    conn->start(fd);
  }
}

// A connection over the limit gets the handshake's "full" answer (best effort) and is closed.
void StoreServer::Impl::refuse_full(int fd) {
  ++stats.connections_dropped;
  log("refused", "refused a connection: at the limit of " + std::to_string(opt.max_connections) + " connections");
  std::string reply;
  wire::Writer w(reply);
  w.u32(wire::kMagic);
  w.u16(wire::kVersion);
  w.u16(static_cast<std::uint16_t>(wire::HelloStatus::kServerFull));
  ssize_t ignored = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

void StoreServer::Impl::log(std::string_view kind, const std::string& line) {
  const auto suppressed = throttle.admit(kind, std::chrono::steady_clock::now());
  if (!suppressed) return;
  std::string text = "store: " + line;
  if (*suppressed != 0) text += " (" + std::to_string(*suppressed) + " similar lines suppressed)";
  if (opt.log) {
    opt.log("crun: " + text + "\n");
  } else {
    log_line(text);  // the loop's thread chose where: start()'s drops what stderr cannot take now
  }
}

void StoreServer::Impl::close_all() {
  boost::system::error_code ec;
  acceptor.close(ec);
  local_listener.close(ec);
  auto all = connections;  // close() erases from the set
  for (auto& c : all) c->close("server stopping", false);
}

StoreServer::StoreServer(StoreServerOptions options) {
  auto io = std::make_unique<asio::io_context>(1);
  impl_ = std::make_unique<Impl>(*io, std::move(options));
  impl_->owned_io = std::move(io);
  impl_->open();
}

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options)
    : impl_(std::make_unique<Impl>(io, std::move(options))) {
  impl_->open();
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::start() {
  if (!impl_->owned_io || impl_->thread.joinable()) return;
  impl_->thread = quiet_thread([this] {
    const LogRedirect never_blocks(stderr_without_blocking());
    impl_->owned_io->run();
  });
}

void StoreServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->owned_io) {
    if (impl_->thread.joinable()) {
      asio::post(*impl_->owned_io, [this] { impl_->close_all(); });
      impl_->thread.join();
    } else {
      impl_->close_all();
    }
  } else if (impl_->io.get_executor().running_in_this_thread() || impl_->io.stopped()) {
    impl_->close_all();
  } else {
    std::promise<void> done;
    asio::post(impl_->io, [&] {
      impl_->close_all();
      done.set_value();
    });
    done.get_future().wait();
  }
}

std::uint16_t StoreServer::port() const { return impl_->bound_port; }
std::string StoreServer::host() const { return impl_->bound_host; }
std::string StoreServer::endpoint() const {
  const std::string& h = impl_->bound_host;
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port());
}

StoreServerStats StoreServer::stats() {
  auto snapshot = [this] {
    StoreServerStats s = impl_->stats;
    s.open_connections = impl_->connections.size();
    s.keys = impl_->keys.size();
    s.queued_reply_bytes = impl_->replies.total();
    for (auto& c : impl_->connections) {
      s.parked_requests += c->parked_count();
      s.input_buffer_bytes += c->input_buffer_bytes();
    }
    return s;
  };
  if (impl_->io.get_executor().running_in_this_thread() || (impl_->owned_io && !impl_->thread.joinable())) return snapshot();
  std::promise<StoreServerStats> result;
  asio::post(impl_->io, [&] { result.set_value(snapshot()); });
  return result.get_future().get();
}

}  // namespace crun
