// loopback_floor: this machine's floor for a 2-rank all_reduce's traffic, measured with plain
// sockets and nothing of crun's, for run_bench.py to print beside the all_reduce figures.
//   loopback_floor exchange <bytes>...   two processes on loopback TCP, each sending <bytes> to
//                                        the other while receiving <bytes> from it: what a 2-rank
//                                        all_reduce (reduce-scatter + all-gather, or one direct
//                                        exchange) moves per rank, without the reduction
//   loopback_floor stream <bytes>...     <bytes> one way only (one TCP stream), then a 1-byte ack
//   CRUN_FLOOR_CPUS=A,B                  the first process on CPU A, the second on CPU B (as
//                                        run_bench.py --pin does to the ranks)
// Per size: 2 warm-up rounds, then max(5, min(50, 256 MiB / size)) timed rounds, each after a
// 1-byte handshake both ways (the all_reduce bench's barrier); buffers allocated and touched
// once. Prints "size=<bytes> median_s=<t> busbw_gbs=<bytes / t / 1e9>": for 2 ranks, the
// all_reduce's bus bandwidth formula applied to the floor's time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void handshake(int fd) {
  char b = 1;
  if (::send(fd, &b, 1, MSG_NOSIGNAL) != 1) die("handshake send");
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 60000) <= 0) die("handshake poll");
    const ssize_t r = ::recv(fd, &b, 1, MSG_DONTWAIT);
    if (r == 1) return;
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) die("handshake recv");
  }
}

// Sends `out` bytes and receives `in` bytes at once, nonblocking, one poll per wake-up.
void move(int fd, const char* send_buf, std::size_t out, char* recv_buf, std::size_t in) {
  std::size_t sent = 0, got = 0;
  while (sent < out || got < in) {
    pollfd p{fd, static_cast<short>((sent < out ? POLLOUT : 0) | (got < in ? POLLIN : 0)), 0};
    if (::poll(&p, 1, 60000) <= 0) die("poll");
    if (sent < out && (p.revents & (POLLOUT | POLLERR))) {
      const ssize_t w = ::send(fd, send_buf + sent, out - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += static_cast<std::size_t>(w);
      else if (w < 0 && errno != EAGAIN && errno != EINTR) die("send");
    }
    if (got < in && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
      const ssize_t r = ::recv(fd, recv_buf + got, in - got, MSG_DONTWAIT);
      if (r > 0) got += static_cast<std::size_t>(r);
      else if (r == 0) die("peer closed");
      else if (errno != EAGAIN && errno != EINTR) die("recv");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[1], "exchange") != 0 && std::strcmp(argv[1], "stream") != 0)) {
    std::fprintf(stderr, "usage: loopback_floor exchange|stream <bytes>...\n");
    return 2;
  }
  const bool exchange = std::strcmp(argv[1], "exchange") == 0;
  std::vector<std::size_t> sizes;
  for (int a = 2; a < argc; ++a) sizes.push_back(std::strtoull(argv[a], nullptr, 10));

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("listen");
  const pid_t child = ::fork();
  if (child < 0) die("fork");
  const bool rank0 = child != 0;
  if (const char* cpus = std::getenv("CRUN_FLOOR_CPUS")) {
    const char* comma = std::strchr(cpus, ',');
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(std::atoi(rank0 || comma == nullptr ? cpus : comma + 1), &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
  }
  int fd;
  if (rank0) {
    fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("connect");
  }
  if (fd < 0) die("socket");
  ::close(listener);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  for (std::size_t bytes : sizes) {
    std::vector<char> out(bytes, 1), in(bytes, 0);
    const int iters = static_cast<int>(std::clamp<std::size_t>((256u << 20) / std::max<std::size_t>(bytes, 1), 5, 50));
    std::vector<double> t;
    for (int i = -2; i < iters; ++i) {
      handshake(fd);
      const auto t0 = std::chrono::steady_clock::now();
      if (exchange) {
        move(fd, out.data(), bytes, in.data(), bytes);
      } else if (rank0) {  // the sender; the time ends when the receiver has it all
        move(fd, out.data(), bytes, nullptr, 0);
        char ack;
        move(fd, nullptr, 0, &ack, 1);
      } else {
        move(fd, nullptr, 0, in.data(), bytes);
        move(fd, "a", 1, nullptr, 0);
      }
      if (i >= 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    if (rank0) std::printf("size=%zu median_s=%.6f busbw_gbs=%.3f iters=%d\n", bytes, med, bytes / med / 1e9, iters);
    std::fflush(stdout);
  }
  ::close(fd);
  if (rank0) {
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}
