// tcpstore_floor: the least a server can do for torch's TCPStore clients, to read the store
// benches against (bench/store/torch_clients.py). Not a store: no limits beyond the bench's
// needs, no timeouts, no logging; loopback only.
//   tcpstore_floor      -> prints "127.0.0.1:<port>", serves until stdin reaches EOF
// One thread, epoll, non-blocking sockets; torch 1.x requests SET (0), GET (2), ADD (3) and
// WAIT (5) on an unordered_map, answered in place; anything else closes that connection.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

struct Conn {
  std::string in;
  int waiting = 0;  // keys its WAIT still misses
};

std::unordered_map<std::string, std::string> data;
std::unordered_map<std::string, std::vector<int>> waiters;
std::unordered_map<int, Conn> conns;

void reply(int fd, const void* p, std::size_t n) {
  while (n > 0) {  // replies are a few bytes: the socket buffer takes them
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p = static_cast<const char*>(p) + w;
    n -= static_cast<std::size_t>(w);
  }
}

void wake(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  for (int fd : it->second) {
    auto c = conns.find(fd);
    if (c != conns.end() && --c->second.waiting == 0) reply(fd, "\0", 1);
  }
  waiters.erase(it);
}

// Parses one request at `p`; returns its length, 0 when incomplete, -1 when not understood.
long handle(int fd, Conn& c, std::string_view p) {
  std::size_t at = 1;
  auto need = [&](std::size_t n) { return p.size() - at >= n; };
  auto u64 = [&]() {
    std::uint64_t v;
    std::memcpy(&v, p.data() + at, 8);
    at += 8;
    return v;
  };
  auto str = [&](std::string& out) {
    if (!need(8)) return false;
    std::uint64_t n;
    std::memcpy(&n, p.data() + at, 8);
    if (n > (1u << 20)) return false;
    if (!need(8 + n)) return false;
    at += 8;
    out.assign(p.data() + at, n);
    at += n;
    return true;
  };
  std::string key, value;
  switch (p[0]) {
    case 0:  // SET
      if (!str(key) || !str(value)) return 0;
      data[key] = value;
      wake(key);
      return static_cast<long>(at);
    case 2: {  // GET
      if (!str(key)) return 0;
      const std::string& v = data[key];
      std::uint64_t n = v.size();
      std::string out(reinterpret_cast<const char*>(&n), 8);
      out += v;
      reply(fd, out.data(), out.size());
      return static_cast<long>(at);
    }
    case 3: {  // ADD
      if (!str(key) || !need(8)) return 0;
      std::int64_t delta = static_cast<std::int64_t>(u64());
      std::string& v = data[key];
      std::int64_t sum = std::strtoll(v.c_str(), nullptr, 10) + delta;
      v = std::to_string(sum);
      reply(fd, &sum, 8);
      wake(key);
      return static_cast<long>(at);
    }
    case 5: {  // WAIT
      if (!need(8)) return 0;
      std::uint64_t n = u64();
      std::vector<std::string> keys(n);
      for (auto& k : keys)
        if (!str(k)) return 0;
      for (auto& k : keys) {
        if (data.count(k) == 0) {
          waiters[k].push_back(fd);
          ++c.waiting;
        }
      }
      if (c.waiting == 0) reply(fd, "\0", 1);
      return static_cast<long>(at);
    }
    default: return -1;
  }
}

}  // namespace

int main() {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcpstore_floor: listen");
    return 1;
  }
  std::printf("127.0.0.1:%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = listener;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, listener, &e);
  e.data.fd = 0;  // stdin: EOF ends the server
  ::epoll_ctl(ep, EPOLL_CTL_ADD, 0, &e);
  epoll_event events[256];
  char buf[65536];
  for (;;) {
    int n = ::epoll_wait(ep, events, 256, -1);
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == 0) return 0;
      if (fd == listener) {
        int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) continue;
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conns[c];
        e.data.fd = c;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        continue;
      }
      Conn& c = conns[fd];
      bool gone = false;
      for (;;) {
        ssize_t r = ::recv(fd, buf, sizeof buf, 0);
        if (r > 0) {
          c.in.append(buf, static_cast<std::size_t>(r));
          if (static_cast<std::size_t>(r) < sizeof buf) break;
          continue;
        }
        gone = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
        break;
      }
      std::size_t used = 0;
      while (!gone && used < c.in.size()) {
        long l = handle(fd, c, std::string_view(c.in).substr(used));
        if (l < 0) gone = true;
        if (l <= 0) break;
        used += static_cast<std::size_t>(l);
      }
      c.in.erase(0, used);
      if (gone) {
        ::close(fd);
        conns.erase(fd);  // a parked WAIT of a closed socket is skipped by wake()
      }
    }
  }
}
