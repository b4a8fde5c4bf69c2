// echo_ceiling: what this machine allows for request/reply over loopback, with no protocol at all.
//   echo_ceiling --clients N [--ops OPS] [--transport tcp|local]
// One thread echoes 16-byte messages through epoll (as the store's single event loop does); N
// client threads each do blocking send/recv round trips (as TcpStore does). Prints
// "echo clients=<N> ops_per_s=<X>": the ceiling the store's ops/s should be read against.
// --transport local: over an abstract Unix-domain socket instead of loopback TCP (the ceiling
// for the store's local socket, store_bench --transport local).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app("bare epoll echo ceiling");
  int clients = 1, ops = 20000;
  app.add_option("--clients", clients)->check(CLI::Range(1, 256));
  app.add_option("--ops", ops)->check(CLI::PositiveNumber);
  std::string transport = "tcp";
  app.add_option("--transport", transport)->check(CLI::IsMember({"tcp", "local"}));
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
  std::thread server([&] {
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
    while (!stop.load()) {
      int n = ::epoll_wait(ep, events, 64, 100);
      for (int i = 0; i < n; ++i) {
        ssize_t r = ::recv(events[i].data.fd, buf, sizeof buf, 0);
        if (r > 0) ::send(events[i].data.fd, buf, static_cast<std::size_t>(r), MSG_NOSIGNAL);
      }
    }
    ::close(ep);
  });
  std::vector<int> socks;
  for (int i = 0; i < clients; ++i) {
    int s = ::socket(local ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(s, addr, local ? len : bound_len) != 0) {
      std::perror("echo_ceiling: connect");
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
  server.join();
  for (int s : socks) ::close(s);
  ::close(listener);
  return 0;
}
