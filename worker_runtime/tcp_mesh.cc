// TcpMesh. See tcp_mesh.h for the contract. The steps: setting up (listen_on, dial_lower_rank,
// accept_peer, check_hello) and one exchange (send_some, receive_some, check_header, wait_ready).
#include "worker_runtime/tcp_mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "base/addresses.h"
#include "worker_runtime/types.h"

namespace crun::rt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kHelloMagic = 0x6372'6d31;  // "crm1"

struct Hello {
  std::uint32_t magic;
  std::uint32_t rank;
  std::uint32_t size;
};

// Every message: this header, then `length` payload bytes.
struct Header {
  std::uint64_t seq;
  std::uint64_t length;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

std::string errno_text(int e) { return std::strerror(e); }

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits for `events` on fd until the deadline; false when the deadline passed first.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) throw InitError("poll: " + errno_text(errno));
  }
}

void write_all(int fd, const void* data, std::size_t n, Clock::time_point deadline, const std::string& who) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) throw InitError("timed out writing to " + who);
    } else if (w < 0 && errno != EINTR) {
      throw InitError("writing to " + who + ": " + errno_text(errno));
    }
  }
}

void read_all(int fd, void* data, std::size_t n, Clock::time_point deadline, const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0) {
      throw InitError(who + " closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline)) throw InitError("timed out reading from " + who);
    } else if (errno != EINTR) {
      throw InitError("reading from " + who + ": " + errno_text(errno));
    }
  }
}

void set_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

struct Addr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};

// Every address of the interface named `iface` (IPv4 first), up or not.
std::vector<Addr> interface_addresses(const std::string& iface) {
  std::vector<InterfaceAddress> all;
  try {
    all = crun::interface_addresses();
  } catch (const std::system_error& e) {
    throw InitError(e.what());
  }
  std::vector<Addr> out;
  for (const InterfaceAddress& i : all) {
    if (i.interface != iface) continue;
    Addr a;
    a.ss = i.address;
    a.len = i.length;
    out.push_back(a);
  }
  if (out.empty()) throw InitError("interface " + iface + " has no IP address");
  return out;
}

std::vector<Addr> resolve(const std::string& host, const char* port, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port, &hints, &res); rc != 0) {
    throw InitError("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  std::vector<Addr> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Addr x;
    x.len = a->ai_addrlen;
    std::memcpy(&x.ss, a->ai_addr, a->ai_addrlen);
    out.push_back(x);
  }
  ::freeaddrinfo(res);
  return out;
}

// Listens on the first candidate address that binds; returns the socket and "<address> <port>".
Fd listen_on(const std::vector<Addr>& candidates, int backlog, std::string& published) {
  std::string last_error = "no address";
  for (const Addr& a : candidates) {
    Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      last_error = errno_text(errno);
      continue;
    }
    Addr any = a;
    if (any.ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any.ss)->sin_port = 0;
    else reinterpret_cast<sockaddr_in6*>(&any.ss)->sin6_port = 0;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&any.ss), any.len) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_error = errno_text(errno);
      continue;
    }
    Addr bound;
    bound.len = sizeof bound.ss;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound.ss), &bound.len);
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&bound.ss), bound.len, host, sizeof host, port, sizeof port,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      last_error = "getnameinfo failed";
      continue;
    }
    published = std::string(host) + " " + port;
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    return fd;
  }
  throw InitError("cannot listen: " + last_error);
}

Fd connect_to(const std::string& endpoint, Clock::time_point deadline, const std::string& who) {
  const auto space = endpoint.rfind(' ');
  if (space == std::string::npos) throw InitError(who + " published a malformed address '" + endpoint + "'");
  const std::string port = endpoint.substr(space + 1);
  std::string last_error = "no address";
  for (const Addr& a : resolve(endpoint.substr(0, space), port.c_str(), AI_NUMERICHOST | AI_NUMERICSERV)) {
    Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) {
      last_error = errno_text(errno);
      continue;
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) {
      if (errno != EINPROGRESS) {
        last_error = errno_text(errno);
        continue;
      }
      if (!wait_fd(fd.get(), POLLOUT, deadline)) throw InitError("timed out connecting to " + who);
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_error = errno_text(err);
        continue;
      }
    }
    return fd;
  }
  throw InitError("cannot connect to " + who + " at " + endpoint + ": " + last_error);
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// ---- setting up the mesh --------------------------------------------------------------------

// Connects to lower rank `peer` at the address it published and says who we are.
Fd dial_lower_rank(crun::Store& store, const std::string& key_prefix, int peer, const Hello& mine,
                   Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  std::string endpoint;
  try {
    endpoint = store.get(key_prefix + std::to_string(peer), std::max(left, std::chrono::milliseconds(1)));
  } catch (const crun::StoreError& e) {
    throw InitError("no address from " + rank_name(peer) + ": " + e.what());
  }
  Fd fd = connect_to(endpoint, deadline, rank_name(peer));
  write_all(fd.get(), &mine, sizeof mine, deadline, rank_name(peer));
  set_options(fd.get());
  return fd;
}

// The next connection to `listener` and the hello it starts with; an empty Fd when there is none
// to take (accept failed for a passing reason, or the peer is not a crun mesh peer: dropped).
Fd accept_peer(int listener, int still_expected, Clock::time_point deadline, Hello& hello) {
  if (!wait_fd(listener, POLLIN, deadline)) {
    throw InitError("timed out waiting for " + std::to_string(still_expected) + " higher rank(s) to connect");
  }
  Fd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return Fd();
    throw InitError("accept: " + errno_text(errno));
  }
  read_all(fd.get(), &hello, sizeof hello, deadline, "a connecting peer");
  if (hello.magic != kHelloMagic) return Fd();
  return fd;
}

// A hello must come from a higher rank of the same world that is not connected yet.
void check_hello(const Hello& h, int rank, int size, const std::vector<int>& fds) {
  if (h.size != static_cast<std::uint32_t>(size) || h.rank <= static_cast<std::uint32_t>(rank) ||
      h.rank >= static_cast<std::uint32_t>(size) || fds[h.rank] >= 0) {
    throw InitError("unexpected hello from rank " + std::to_string(h.rank) + " of world size " +
                    std::to_string(h.size));
  }
}

// ---- one exchange ---------------------------------------------------------------------------

// One Transfer in flight: its message headers and how far each direction got.
struct Pending {
  const TcpMesh::Transfer* t;
  Header out;
  Header in;
  std::size_t sent = 0;  // header + payload bytes
  std::size_t got = 0;
  bool out_done() const { return sent == sizeof(Header) + t->send_bytes; }
  bool in_done() const { return got == sizeof(Header) + t->recv_bytes; }
  // What poll() must wait for; 0 once both directions are done.
  short events() const {
    short e = 0;
    if (!out_done()) e |= POLLOUT;
    if (!in_done()) e |= POLLIN;
    return e;
  }
};

// Sends as much of the header and payload as the socket takes without blocking.
void send_some(int fd, Pending& s, const std::string& who) {
  while (!s.out_done()) {
    iovec iov[2];
    int n = 0;
    if (s.sent < sizeof(Header)) {
      iov[n++] = {reinterpret_cast<char*>(&s.out) + s.sent, sizeof(Header) - s.sent};
      if (s.t->send_bytes > 0) iov[n++] = {const_cast<void*>(s.t->send), s.t->send_bytes};
    } else {
      const std::size_t off = s.sent - sizeof(Header);
      iov[n++] = {static_cast<char*>(const_cast<void*>(s.t->send)) + off, s.t->send_bytes - off};
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) {
      s.sent += static_cast<std::size_t>(w);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      throw MeshError("sending to " + who + ": " + errno_text(errno));
    }
  }
}

// The header just received must be message `expected_seq` (then counted) of the agreed length.
void check_header(const Pending& s, std::uint64_t& expected_seq, const std::string& who) {
  if (s.in.seq != expected_seq || s.in.length != s.t->recv_bytes) {
    throw MeshError(who + " sent message " + std::to_string(s.in.seq) + " of " + std::to_string(s.in.length) +
                    " bytes, expected message " + std::to_string(expected_seq) + " of " +
                    std::to_string(s.t->recv_bytes) + " (ranks issued different collectives)");
  }
  ++expected_seq;
}

// Reads as much of the header and payload as has arrived, checking the header once it is in.
void receive_some(int fd, Pending& s, std::uint64_t& expected_seq, const std::string& who) {
  while (!s.in_done()) {
    iovec iov[2];
    int n = 0;
    if (s.got < sizeof(Header)) {
      iov[n++] = {reinterpret_cast<char*>(&s.in) + s.got, sizeof(Header) - s.got};
      if (s.t->recv_bytes > 0) iov[n++] = {s.t->recv, s.t->recv_bytes};
    } else {
      const std::size_t off = s.got - sizeof(Header);
      iov[n++] = {static_cast<char*>(s.t->recv) + off, s.t->recv_bytes - off};
    }
    const bool had_header = s.got >= sizeof(Header);
    const ssize_t r = ::readv(fd, iov, n);
    if (r > 0) {
      s.got += static_cast<std::size_t>(r);
      if (!had_header && s.got >= sizeof(Header)) check_header(s, expected_seq, who);
    } else if (r == 0) {
      throw MeshError(who + " closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      throw MeshError("receiving from " + who + ": " + errno_text(errno));
    }
  }
}

// Waits until a socket of `pfds` is ready; throws MeshError, naming the first unfinished peer,
// once the deadline passed.
void wait_ready(std::vector<pollfd>& pfds, const std::vector<Pending>& pending, Clock::time_point deadline) {
  const int n = ::poll(pfds.data(), pfds.size(), ms_left(deadline));
  if (n < 0 && errno != EINTR) throw MeshError("poll: " + errno_text(errno));
  if (n == 0 && Clock::now() >= deadline) {
    for (const Pending& s : pending) {
      if (!s.in_done() || !s.out_done()) {
        throw MeshError(std::string("deadline passed while ") + (s.in_done() ? "sending to " : "waiting for ") +
                        rank_name(s.t->peer));
      }
    }
  }
}

}  // namespace

TcpMesh::TcpMesh(int rank, int size)
    : rank_(rank), fds_(static_cast<std::size_t>(size), -1), seq_out_(fds_.size(), 0), seq_in_(fds_.size(), 0) {}

TcpMesh::~TcpMesh() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

// Listen and publish; dial every lower rank; accept every higher one.
std::unique_ptr<TcpMesh> TcpMesh::connect(crun::Store& store, const std::string& key_prefix, int rank, int size,
                                          const std::string& host, const std::string& iface,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::unique_ptr<TcpMesh> mesh(new TcpMesh(rank, size));
  if (size == 1) return mesh;
  std::string published;
  Fd listener = listen_on(!iface.empty() ? interface_addresses(iface) : resolve(host, nullptr, 0), size, published);
  store.set(key_prefix + std::to_string(rank), published);

  const Hello mine{kHelloMagic, static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size)};
  for (int peer = 0; peer < rank; ++peer) {
    mesh->fds_[static_cast<std::size_t>(peer)] = dial_lower_rank(store, key_prefix, peer, mine, deadline).release();
  }
  for (int accepted = rank + 1; accepted < size;) {
    Hello h{};
    Fd fd = accept_peer(listener.get(), size - accepted, deadline, h);
    if (fd.get() < 0) continue;
    check_hello(h, rank, size, mesh->fds_);
    set_options(fd.get());
    mesh->fds_[h.rank] = fd.release();
    ++accepted;
  }
  return mesh;
}

// Number the messages; then, until every transfer is done, move what each socket allows and
// poll for the rest.
void TcpMesh::exchange(std::span<const Transfer> transfers, Clock::time_point deadline) {
  std::vector<Pending> pending;
  pending.reserve(transfers.size());
  for (const Transfer& t : transfers) {
    if (t.peer < 0 || t.peer >= size() || t.peer == rank_) throw MeshError("bad peer " + std::to_string(t.peer));
    const auto p = static_cast<std::size_t>(t.peer);
    pending.push_back(Pending{&t, Header{seq_out_[p]++, t.send_bytes}, Header{}, 0, 0});
  }
  std::vector<pollfd> pfds;
  for (;;) {
    pfds.clear();
    for (Pending& s : pending) {
      const auto p = static_cast<std::size_t>(s.t->peer);
      const std::string who = rank_name(s.t->peer);
      send_some(fds_[p], s, who);
      receive_some(fds_[p], s, seq_in_[p], who);
      if (const short events = s.events(); events != 0) pfds.push_back(pollfd{fds_[p], events, 0});
    }
    if (pfds.empty()) return;
    wait_ready(pfds, pending, deadline);
  }
}

}  // namespace crun::rt
