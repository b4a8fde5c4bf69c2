#include "store/store_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "base/random_bits.h"
#include "store/local_socket.h"

namespace crun {

namespace {

int poll_timeout_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left + 1);
}

// A connection to a port of this host that nobody listens on, made from that same port (it is in
// the ephemeral range, as any port the kernel picks as free is): TCP's simultaneous open connects
// the socket to itself. It would read its own requests back and hold the port its server is about
// to bind.
bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
    return false;
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

// One non-blocking connect attempt bounded by `deadline` (and cut short by `cancel`); returns the
// fd or -1 with `reason`, and `refused` when nobody listens there (refused, or connected to itself).
int try_connect(const addrinfo* ai, Clock::time_point deadline, const ConnectCancel* cancel, std::string& reason,
                bool& refused) {
  refused = false;
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    reason = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    refused = errno == ECONNREFUSED;
    reason = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int r = 0;
  for (;;) {  // in slices of at most 100 ms, so that a cancel is honoured promptly
    int left = poll_timeout_ms(deadline);
    r = ::poll(&p, 1, cancel != nullptr && (left < 0 || left > 100) ? 100 : left);
    if (r != 0 || left <= 100 || (cancel != nullptr && cancel->cancelled())) break;
  }
  if (r <= 0) {
    reason = r == 0 ? (cancel != nullptr && cancel->cancelled() ? "cancelled" : "connect timed out") : std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    refused = err == ECONNREFUSED;
    reason = std::strerror(err);
    ::close(fd);
    return -1;
  }
  if (connected_to_itself(fd)) {  // nobody listens: the kernel gave it the endpoint's port
    reason = "nobody listens (connected to itself)";
    refused = true;
    const linger reset{1, 0};  // closed by a reset: no TIME_WAIT keeps the port from its server
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    ::close(fd);
    return -1;
  }
  return fd;
}

// One attempt at each of the endpoint's addresses in turn, each bounded by `deadline`, an address
// of this host first through the store's local socket (store/local_socket.h; not when
// options.local_socket is false; `local_ip` is then the connection's local address): the fd of
// the first that connects, or -1 with `reason` and `refused` (nobody listened at any of them).
int connect_any(const StoreEndpoint& endpoint, Clock::time_point deadline, const StoreClientOptions& options,
                std::string& reason, bool& refused, std::string& local_ip) {
  const ConnectCancel* cancel = options.cancel.get();
  refused = false;
  local_ip.clear();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (const int gai = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &list); gai != 0) {
    reason = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    return -1;
  }
  int fd = -1;
  bool all_refused = true;
  for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    if (options.local_socket && (fd = connect_local(ai->ai_addr, ai->ai_addrlen, local_ip)) >= 0) break;
    bool this_refused = false;
    fd = try_connect(ai, deadline, cancel, reason, this_refused);
    all_refused = all_refused && this_refused;
  }
  ::freeaddrinfo(list);
  refused = fd < 0 && all_refused;
  return fd;
}

std::string seconds_text(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

StoreConnection::StoreConnection(const StoreEndpoint& endpoint, const StoreClientOptions& options, Handshake handshake)
    : name_("store " + endpoint.str()) {
  const auto start = Clock::now();
  const auto deadline = start + options.connect_timeout;
  std::string hello = wire::encode_hello(options.token);
  std::string reason;
  std::mt19937 rng(static_cast<std::mt19937::result_type>(random_bits()));
  auto backoff = std::chrono::milliseconds(10);
  for (int attempt = 1;; ++attempt) {
    bool refused = false;
    fd_ = connect_any(endpoint, deadline, options, reason, refused, local_ip_);
    if (fd_ >= 0) break;
    auto now = Clock::now();
    if (options.cancel && options.cancel->cancelled()) throw StoreConnectionError(name_ + ": connecting cancelled");
    if (now >= deadline) {
      throw StoreConnectionError(name_ + ": cannot connect: " + reason + " (" + std::to_string(attempt) +
                                 " attempts over " + seconds_text(now - start) + ")");
    }
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    auto pause = std::chrono::duration_cast<Clock::duration>(backoff * jitter(rng));
    auto wait = std::chrono::duration_cast<Millis>(std::min<Clock::duration>(pause, deadline - now));
    if (options.cancel) options.cancel->wait_for(wait);  // backoff between attempts, cut short by cancel
    else std::this_thread::sleep_for(wait);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  use_socket(deadline);
  if (handshake == Handshake::kPipelined) return;  // the caller sends hello() and calls await_hello()
  try {
    send(hello, hello_deadline_);
  } catch (const StoreConnectionError&) {
    // A server that refuses at once (at its connection limit) answers and closes, which may be
    // before the hello arrives (on a local socket, often): its answer is still in the socket,
    // and it is the reason to report.
    try {
      await_hello();
    } catch (const StoreRejected&) {
      throw;
    } catch (const StoreError&) {
    }
    throw;
  }
  await_hello();
}

StoreConnection::StoreConnection(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

std::unique_ptr<StoreConnection> StoreConnection::connect_once(const StoreEndpoint& endpoint,
                                                               const StoreClientOptions& options, Millis wait,
                                                               bool* refused) {
  std::string reason;
  bool nobody = false;
  std::string local_ip;
  const int fd = connect_any(endpoint, Clock::now() + wait, options, reason, nobody, local_ip);
  if (refused != nullptr) *refused = nobody;
  if (fd < 0) return nullptr;
  std::unique_ptr<StoreConnection> made(new StoreConnection(fd, "store " + endpoint.str()));
  made->local_ip_ = std::move(local_ip);
  made->use_socket(Clock::now() + options.connect_timeout);
  return made;
}

// Blocking from here on: receive() blocks in recv() bounded by SO_RCVTIMEO (one syscall per reply
// instead of poll + recv); send() passes MSG_DONTWAIT and polls only when the buffer is full.
// A TCP connection gets no Nagle delay and keepalive probes; a local socket needs neither.
void StoreConnection::use_socket(Clock::time_point connect_deadline) {
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  if (local_ip_.empty()) {
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  hello_deadline_ = std::max(connect_deadline, Clock::now() + std::chrono::seconds(10));
}

std::string StoreConnection::hello(const StoreClientOptions& options) { return wire::encode_hello(options.token); }

void StoreConnection::await_hello() {
  while (end_ - begin_ < 8) fill(hello_deadline_);
  wire::Reader r(std::string_view(buf_.data() + begin_, 8));
  std::uint32_t magic = r.u32();
  r.u16();
  auto status = static_cast<wire::HelloStatus>(r.u16());
  begin_ += 8;
  if (magic != wire::kMagic) throw StoreConnectionError(name_ + ": the peer is not a crun store (bad magic in handshake)");
  if (status != wire::HelloStatus::kOk) {
    throw StoreRejected(static_cast<int>(status), name_ + ": handshake refused: " + wire::hello_status_name(status));
  }
}

StoreConnection::~StoreConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreConnection::interrupt() {
  interrupted_.store(true, std::memory_order_release);
  ::shutdown(fd_, SHUT_RDWR);
}

std::string StoreConnection::local_address() const {
  if (!local_ip_.empty()) return local_ip_;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return host;
}

void StoreConnection::send(std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (r == 0) throw StoreTimeout(name_ + ": sending timed out (the server is not reading)");
      continue;
    }
    throw StoreConnectionError(name_ + ": connection lost while sending: " + std::strerror(errno));
  }
}

void StoreConnection::fill(Clock::time_point deadline) {
  const Wait w = fill_or_stop(deadline);
  if (w == Wait::kTimeout) throw StoreTimeout(name_ + ": no reply in time");
  if (w == Wait::kInterrupted) throw StoreConnectionError(name_ + ": connection interrupted");
}

void StoreConnection::make_room() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (buf_.size() - end_ < kMinFreeBytes) {
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    // Memory follows the bytes received: doubling from one page (a zero-filled 64 KiB per
    // connection cost an agent 16 page faults for each of its connections).
    if (buf_.size() - end_ < kMinFreeBytes) buf_.resize(std::max(2 * buf_.size(), end_ + kMinFreeBytes));
  }
}

bool StoreConnection::recv_now() {
  make_room();
  for (;;) {
    const ssize_t n = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (n > 0) {
      end_ += static_cast<std::size_t>(n);
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    throw StoreConnectionError(name_ + (n == 0 ? ": the server closed the connection"
                                               : std::string(": connection lost: ") + std::strerror(errno)));
  }
}

bool StoreConnection::try_hello() {
  while (end_ - begin_ < 8) {
    if (!recv_now()) return false;
  }
  await_hello();  // all 8 bytes are here: it does not wait
  return true;
}

bool StoreConnection::try_receive(Reply& reply) {
  for (;;) {
    if (take_frame(reply)) return true;
    if (!recv_now()) return false;
  }
}

bool StoreConnection::take_frame(Reply& reply) {
  if (end_ - begin_ < wire::kFrameHeaderSize) return false;
  std::uint32_t len;
  try {
    len = wire::decode_frame_length(buf_.data() + begin_, kMaxFrameSize);
  } catch (const wire::ProtocolError& e) {
    throw StoreConnectionError(name_ + ": malformed reply: " + e.what());
  }
  const std::size_t total = wire::kFrameHeaderSize + len;
  if (end_ - begin_ < total) return false;
  const char* body = buf_.data() + begin_ + wire::kFrameHeaderSize;
  wire::Reader r(std::string_view(body, len));
  reply.status = static_cast<wire::Status>(r.u8());
  reply.id = r.u32();
  reply.payload = std::string_view(body + wire::kBodyHeaderSize, len - wire::kBodyHeaderSize);
  begin_ += total;
  return true;
}

StoreConnection::Wait StoreConnection::fill_or_stop(Clock::time_point deadline) {
  make_room();
  for (;;) {
    bound_receive(deadline);
    ssize_t n = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, 0);
    if (n > 0) {
      end_ += static_cast<std::size_t>(n);
      return Wait::kReply;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) return Wait::kTimeout;
      continue;
    }
    if (interrupted_.load(std::memory_order_acquire)) return Wait::kInterrupted;
    throw StoreConnectionError(name_ + (n == 0 ? ": the server closed the connection"
                                               : std::string(": connection lost: ") + std::strerror(errno)));
  }
}

void StoreConnection::bound_receive(Clock::time_point deadline) {
  long long want = 0;  // 0: no deadline
  if (deadline != Clock::time_point::max()) {
    want = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1;
    if (want < 1) want = 1;
  }
  // Keep the configured timeout while it is close enough: at most 5% + 10 ms past the deadline,
  // and not less than half of what is left (a premature EAGAIN only costs another recv()).
  bool keep = recv_timeout_ms_ >= 0 &&
              (want == 0 ? recv_timeout_ms_ == 0
                         : recv_timeout_ms_ != 0 && recv_timeout_ms_ <= want + want / 20 + 10 && recv_timeout_ms_ >= want / 2);
  if (keep) return;
  timeval tv{static_cast<time_t>(want / 1000), static_cast<suseconds_t>((want % 1000) * 1000)};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  recv_timeout_ms_ = want;
}

StoreConnection::Reply StoreConnection::receive(Clock::time_point deadline) {
  Reply reply;
  while (!take_frame(reply)) fill(deadline);  // the buffer grows with the bytes, not the length a frame declares
  return reply;
}

void raise_reply_error(const std::string& what, wire::Status status, std::string_view payload) {
  std::string message;
  try {
    wire::Reader r(payload);
    message = std::string(r.str());
  } catch (const wire::ProtocolError&) {
    message = wire::status_name(status);
  }
  if (status == wire::Status::kTimeout) throw StoreTimeout(what + ": timed out: " + message);
  throw StoreRejected(static_cast<int>(status), what + ": rejected: " + message);
}

}  // namespace crun
