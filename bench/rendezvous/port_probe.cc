// port_probe: what it costs an agent to learn that another agent of its host already listens on
// the shared endpoint, against the number of connections that listener has accepted:
//   port_probe [CONNECTIONS...]        (default 0 1000 4000 9000; needs 2 fds per connection)
// For each count, a listener on 127.0.0.1 (SO_REUSEADDR, as crun's store binds) accepts that many
// loopback connections; then, 200 times each, the microseconds of
//   bind probe:     socket, SO_REUSEADDR, bind the wildcard address on that port (EADDRINUSE),
//                   close: crun's former test of a shared port;
//   plain bind:     the same without SO_REUSEADDR (the floor for one bind of that port);
//   connect probe:  socket, connect, accept on the listener's side, close both: the attempt crun
//                   makes now, which an agent that joins keeps as its store connection (the
//                   accept is work the store does for every agent either way).
// Prints one line per count; bounded (the counts given, 200 probes each); exit 2 for usage, 3 when
// a socket cannot be made.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kProbes = 200;

double now_us() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "port_probe: %s: %s\n", what, std::strerror(errno));
  std::exit(3);
}

int tcp_socket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  return fd;
}

void run(int connections) {
  const int one = 1;
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int listener = tcp_socket();
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof at;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 || ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) != 0)
    fail("listen");
  std::vector<int> held;
  for (int i = 0; i < connections; ++i) {
    const int c = tcp_socket();
    if (::connect(c, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) fail("connect");
    const int a = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (a < 0) fail("accept");
    held.push_back(c);
    held.push_back(a);
  }
  sockaddr_in wildcard = at;
  wildcard.sin_addr.s_addr = htonl(INADDR_ANY);
  auto bind_probe = [&](bool reuse) {
    int taken = 0;
    const double t0 = now_us();
    for (int i = 0; i < kProbes; ++i) {
      const int fd = tcp_socket();
      if (reuse) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&wildcard), sizeof wildcard) != 0 && errno == EADDRINUSE) ++taken;
      ::close(fd);
    }
    if (taken != kProbes) std::fprintf(stderr, "port_probe: only %d of %d bind probes found the port taken\n", taken, kProbes);
    return (now_us() - t0) / kProbes;
  };
  const double reuse_us = bind_probe(true);
  const double plain_us = bind_probe(false);
  const double t0 = now_us();
  for (int i = 0; i < kProbes; ++i) {
    const int fd = tcp_socket();
    if (::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) fail("connect probe");
    const int a = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (a < 0) fail("accept probe");
    ::close(fd);
    ::close(a);
  }
  const double connect_us = (now_us() - t0) / kProbes;
  std::printf("%6d connections held: bind probe %7.1f us   plain bind %5.1f us   connect probe %5.1f us\n", connections,
              reuse_us, plain_us, connect_us);
  for (int fd : held) ::close(fd);
  ::close(listener);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const long n = std::strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || n < 0 || n > 100000) {
      std::fprintf(stderr, "port_probe: connection count '%s' is not a number in 0..100000\n", argv[i]);
      return 2;
    }
    counts.push_back(static_cast<int>(n));
  }
  if (counts.empty()) counts = {0, 1000, 4000, 9000};
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    fds.rlim_cur = fds.rlim_max;  // within the hard limit
    ::setrlimit(RLIMIT_NOFILE, &fds);
  }
  for (int n : counts) run(n);
  return 0;
}
