// rdzv_floor_agent: the least one node's agent can do in issue 16's shared-endpoint run, so that
// run.py measures the machine's floor for that work beside crun (and beside the process floor,
// N x `timeout 60 /bin/true`, which has no rendezvous):
//   rdzv_floor_agent [--io-thread] PORT NNODES -- PROGRAM [ARGS...]
// Each process tries to listen on 127.0.0.1:PORT; the one whose bind succeeds hosts, the others
// connect (retrying while refused: the host may not listen yet). The work, nothing more:
//   joiner: connect, send its join (1 byte), receive its node rank (4 bytes) once all NNODES
//           have joined, spawn PROGRAM and reap it, send its exit status (1 byte), receive the
//           job's result (1 byte), close, exit with it.
//   host:   one thread, epoll; accept and read the joins; at NNODES answer every joiner with its
//           rank (0 is its own), spawn its own PROGRAM (watched by a pidfd), collect every
//           status; then send the result (0: every PROGRAM exited 0, else 1) to every joiner and
//           wait until each has closed (the exit barrier), exit with it.
// No keeper, cgroup, run directory, environment contract, heartbeats or restarts: crun's figure
// against this one is what those and crun's generality cost. --io-thread: a joiner does its
// socket's work on a second thread, as crun's participant does on its store connection's I/O
// thread, and hands each answer across through an eventfd (the same work, plus a thread and
// three hand-offs: what that shape costs, measured). Exit 3 with one line on stderr for
// a failure of its own (socket, timeout after 120 s); 2 for usage.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr int kDeadlineSeconds = 120;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rdzv_floor_agent: %s: %s\n", what, std::strerror(errno));
  std::exit(3);
}

long long monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

sockaddr_in endpoint(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write");
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void read_all(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = ECONNRESET;
    if (r <= 0) fail("read");
    c += r;
    n -= static_cast<std::size_t>(r);
  }
}

pid_t spawn(char** program) {
  pid_t pid;
  if (int e = posix_spawn(&pid, program[0], nullptr, nullptr, program, environ); e != 0) {
    errno = e;
    fail("spawn");
  }
  return pid;
}

int status_byte(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 ? 0 : 1; }

// The joiner's exchange: its join, its rank; the program run and reaped; its status, the result.
int exchange(int fd, char** program) {
  const char joined = 'j';
  write_all(fd, &joined, 1);
  std::uint32_t rank = 0;
  read_all(fd, &rank, sizeof rank);
  int st = 0;
  if (::waitpid(spawn(program), &st, 0) < 0) fail("waitpid");
  const char status = static_cast<char>(status_byte(st));
  write_all(fd, &status, 1);
  char result = 1;
  read_all(fd, &result, 1);
  return result;
}

// The same, the socket's side on a second thread; each step's answer crosses by an eventfd.
int exchange_on_io_thread(int fd, char** program) {
  const int to_main = ::eventfd(0, EFD_CLOEXEC), to_io = ::eventfd(0, EFD_CLOEXEC);
  if (to_main < 0 || to_io < 0) fail("eventfd");
  const std::uint64_t one = 1;
  std::uint64_t got = 0;
  std::atomic<char> status{1}, result{1};  // the eventfd's write and read order them too
  std::thread io([&] {
    const char joined = 'j';
    write_all(fd, &joined, 1);
    std::uint32_t rank = 0;
    read_all(fd, &rank, sizeof rank);
    write_all(to_main, &one, sizeof one);  // the rank is in
    std::uint64_t go = 0;
    read_all(to_io, &go, sizeof go);  // the status is ready
    const char mine = status.load(std::memory_order_acquire);
    write_all(fd, &mine, 1);
    char theirs = 1;
    read_all(fd, &theirs, 1);
    result.store(theirs, std::memory_order_release);
    write_all(to_main, &one, sizeof one);  // the result is in
  });
  read_all(to_main, &got, sizeof got);
  int st = 0;
  if (::waitpid(spawn(program), &st, 0) < 0) fail("waitpid");
  status.store(static_cast<char>(status_byte(st)), std::memory_order_release);
  write_all(to_io, &one, sizeof one);
  read_all(to_main, &got, sizeof got);
  io.join();
  ::close(to_main);
  ::close(to_io);
  return result.load(std::memory_order_acquire);
}

int join(int port, char** program, bool io_thread) {
  const sockaddr_in a = endpoint(port);
  const long long deadline = monotonic_ms() + kDeadlineSeconds * 1000LL;
  int fd = -1;
  for (;;) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
      // Nobody listened and the kernel gave it the endpoint's own port: connected to itself.
      sockaddr_in local{};
      socklen_t len = sizeof local;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 || local.sin_port != a.sin_port) break;
      const linger reset{1, 0};  // closed by a reset: the port is free for the host at once
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    } else if (errno != ECONNREFUSED || monotonic_ms() > deadline) {
      fail("connect");
    }
    ::close(fd);
    timespec pause{0, 1000000};  // the host bound the port and is about to listen
    ::nanosleep(&pause, nullptr);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int result = io_thread ? exchange_on_io_thread(fd, program) : exchange(fd, program);
  ::close(fd);
  return result;
}

struct Joiner {
  int fd;
  int messages = 0;  // 1: joined, 2: reported
  bool closed = false;
};

int host(int listen_fd, int nnodes, char** program) {
  if (::listen(listen_fd, 4096) != 0) fail("listen");
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) fail("epoll_create1");
  auto watch = [&](int fd, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) fail("epoll_ctl");
  };
  constexpr std::uint64_t kListener = ~0ULL, kWorker = ~0ULL - 1;
  watch(listen_fd, kListener);
  std::vector<Joiner> joiners;
  joiners.reserve(static_cast<std::size_t>(nnodes));
  int joined = 0, reported = 0, closed = 0, result = 0, pidfd = -1;
  pid_t worker = -1;
  const int others = nnodes - 1;
  const long long deadline = monotonic_ms() + kDeadlineSeconds * 1000LL;
  auto start_worker = [&] {
    for (std::uint32_t rank = 1; rank <= static_cast<std::uint32_t>(others); ++rank)
      write_all(joiners[rank - 1].fd, &rank, sizeof rank);
    worker = spawn(program);
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, worker, 0));
    if (pidfd < 0) fail("pidfd_open");
    watch(pidfd, kWorker);
  };
  auto report_all = [&] {
    const char r = static_cast<char>(result);
    for (auto& j : joiners) write_all(j.fd, &r, 1);
  };
  if (others == 0) start_worker();
  while (closed < others || reported < nnodes) {
    epoll_event evs[64];
    const int n = ::epoll_wait(ep, evs, 64, 1000);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    if (monotonic_ms() > deadline) {
      errno = ETIMEDOUT;
      fail("job");
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = evs[i].data.u64;
      if (tag == kListener) {
        for (;;) {
          const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) break;
          if (static_cast<int>(joiners.size()) == others) fail("a node too many");
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          joiners.push_back({fd});
          watch(fd, joiners.size() - 1);
        }
      } else if (tag == kWorker) {
        int st = 0;
        if (::waitpid(worker, &st, 0) < 0) fail("waitpid");
        result |= status_byte(st);
        ::close(pidfd);
        if (++reported == nnodes) report_all();
      } else {
        Joiner& j = joiners[tag];
        char b[2];
        const ssize_t r = ::read(j.fd, b, sizeof b);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          if (j.messages < 2) fail("a node left before its report");
          ::epoll_ctl(ep, EPOLL_CTL_DEL, j.fd, nullptr);
          ::close(j.fd);
          ++closed;
          continue;
        }
        for (ssize_t k = 0; k < r; ++k) {
          if (++j.messages == 1) {
            if (++joined == others) start_worker();
          } else {
            result |= b[k] != 0;
            if (++reported == nnodes) report_all();
          }
        }
      }
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const bool io_thread = argc > 1 && std::strcmp(argv[1], "--io-thread") == 0;
  if (io_thread) {
    --argc;
    ++argv;
  }
  if (argc < 5 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: rdzv_floor_agent [--io-thread] PORT NNODES -- PROGRAM [ARGS...]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]), nnodes = std::atoi(argv[2]);
  if (port < 1 || port > 65535 || nnodes < 1) {
    std::fprintf(stderr, "rdzv_floor_agent: PORT must be 1-65535 and NNODES at least 1\n");
    return 2;
  }
  char** program = argv + 4;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket");
  const sockaddr_in a = endpoint(port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return host(fd, nnodes, program);
  if (errno != EADDRINUSE) fail("bind");
  ::close(fd);
  return join(port, program, io_thread);
}
