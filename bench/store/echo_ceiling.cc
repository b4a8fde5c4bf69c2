// echo_ceiling: what this machine allows for request/reply over loopback, with no protocol at all.
//   echo_ceiling --clients N [--ops OPS] [--transport tcp|local] [--server-process]
// One thread echoes 16-byte messages through epoll (as the store's single event loop does); N
// client threads each do blocking send/recv round trips (as TcpStore does). Prints
// "echo clients=<N> ops_per_s=<X>": the ceiling the store's ops/s should be read against.
// --transport local: over an abstract Unix-domain socket instead of loopback TCP (the ceiling
// for the store's local socket, store_bench --transport local).
// --server-process: the echo loop runs in a child process instead of a thread of the clients'
// process, as the store server is to its clients: each hand-over between server and client is
// then a switch between address spaces (which a hypervisor may charge for, as PVM guests do).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

// Accepts `clients` connections on `listener` and echoes what each sends until `stop` is set or
// every one of them has closed.
void serve(int listener, int clients, bool local, const std::atomic<bool>& stop) {
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  for (int i = 0; i < clients; ++i) {
    int c = ::accept(listener, nullptr, nullptr);
    int one = 1;
    if (!local) ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = c;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
  }
  epoll_event events[64];
  char buf[64];
  int open = clients;
  while (!stop.load() && open > 0) {
    int n = ::epoll_wait(ep, events, 64, 100);
    for (int i = 0; i < n; ++i) {
      ssize_t r = ::recv(events[i].data.fd, buf, sizeof buf, 0);
      if (r > 0) {
        ::send(events[i].data.fd, buf, static_cast<std::size_t>(r), MSG_NOSIGNAL);
      } else if (r == 0) {
        ::close(events[i].data.fd);
        --open;
      }
    }
  }
  ::close(ep);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("bare epoll echo ceiling");
  int clients = 1, ops = 20000;
  app.add_option("--clients", clients)->check(CLI::Range(1, 256));
  app.add_option("--ops", ops)->check(CLI::PositiveNumber);
  std::string transport = "tcp";
  app.add_option("--transport", transport)->check(CLI::IsMember({"tcp", "local"}));
  bool server_process = false;
  app.add_flag("--server-process", server_process, "the echo loop in a child process, not a thread");
  CLI11_PARSE(app, argc, argv);

  const bool local = transport == "local";
  int listener = ::socket(local ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_storage storage{};
  auto* addr = reinterpret_cast<sockaddr*>(&storage);
  socklen_t len = sizeof storage;
  if (local) {  // an abstract name of this process' own
    auto* un = reinterpret_cast<sockaddr_un*>(&storage);
    un->sun_family = AF_UNIX;
    const int n = std::snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "crun-echo-ceiling/%d", ::getpid());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&storage);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  socklen_t bound_len = len;
  if (::bind(listener, addr, len) != 0 || ::listen(listener, 256) != 0 ||
      ::getsockname(listener, addr, &bound_len) != 0) {
    std::perror("echo_ceiling: listen");
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread server;
  pid_t child = -1;
  if (server_process) {  // before any thread: the child only serves and exits
    child = ::fork();
    if (child < 0) {
      std::perror("echo_ceiling: fork");
      return 1;
    }
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      serve(listener, clients, local, stop);
      ::_exit(0);
    }
  } else {
    server = std::thread([&] { serve(listener, clients, local, stop); });
  }
  std::vector<int> socks;
  for (int i = 0; i < clients; ++i) {
    int s = ::socket(local ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(s, addr, local ? len : bound_len) != 0) {
      std::perror("echo_ceiling: connect");
      if (child > 0) ::kill(child, SIGKILL);
      return 1;
    }
    int one = 1;
    if (!local) ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    socks.push_back(s);
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      char msg[16] = {};
      for (int k = 0; k < ops; ++k) {
        ::send(socks[i], msg, sizeof msg, MSG_NOSIGNAL);
        ::recv(socks[i], msg, sizeof msg, MSG_WAITALL);
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("echo clients=%d ops_per_s=%.0f\n", clients, static_cast<double>(ops) * clients / secs);
  stop = true;
  for (int s : socks) ::close(s);  // the child's loop ends when all are closed
  if (server_process) {
    int status = 0;
    ::waitpid(child, &status, 0);
  } else {
    server.join();
  }
  ::close(listener);
  return 0;
}
