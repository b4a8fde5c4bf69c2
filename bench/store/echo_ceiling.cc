// echo_ceiling: what this machine allows for request/reply over loopback, with no protocol at all.
//   echo_ceiling --clients N [--ops OPS]
// One thread echoes 16-byte messages through epoll (as the store's single event loop does); N
// client threads each do blocking send/recv round trips (as TcpStore does). Prints
// "echo clients=<N> ops_per_s=<X>": the ceiling the store's ops/s should be read against.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app("bare epoll echo ceiling");
  int clients = 1, ops = 20000;
  app.add_option("--clients", clients)->check(CLI::Range(1, 256));
  app.add_option("--ops", ops)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 256) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("echo_ceiling: listen");
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread server([&] {
    int ep = ::epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < clients; ++i) {
      int c = ::accept(listener, nullptr, nullptr);
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      std::perror("echo_ceiling: connect");
      return 1;
    }
    int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
