// store_bench: ops/s of crun's store client against a running server.
//   store_bench --endpoint H:P --op set|get|add --clients N --ops OPS [--pipeline DEPTH] [--transport tcp|local]
// Prints one line: "<op> clients=<N> pipeline=<D> ops_per_s=<X>". Each client is a thread with
// its own connection; OPS is per client. With --pipeline D a client sends D requests per flush.
//   store_bench --endpoint H:P --op barrier --clients N [--threads T]
// A torch-style barrier of N connections (up to 20,000), driven by T threads (default 64): every
// client adds 1 to a counter, the one that sees N sets "done", every client waits for "done".
// Prints "barrier clients=<N> ms=<X>" (connections made beforehand, not timed).
// --transport: tcp (the default: what clients on other hosts use) or local (the store's local
// socket, store/local_socket.h, which crun's clients on the store's host use).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "store/store_client.h"

namespace {

int barrier(const crun::StoreEndpoint& ep, crun::StoreClientOptions opt, int clients, int threads) {
  threads = std::min(threads, clients);
  opt.timeout = std::chrono::seconds(120);
  opt.connect_timeout = std::chrono::seconds(30);
  std::vector<std::unique_ptr<crun::TcpStore>> stores;
  stores.reserve(static_cast<std::size_t>(clients));
  for (int i = 0; i < clients; ++i) stores.push_back(std::make_unique<crun::TcpStore>(ep, opt));
  // Keys of this run only: a server may serve several runs.
  const std::string prefix = "barrier/" + std::to_string(::getpid()) + "-" +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "/";
  const std::string count_key = prefix + "count", done_key = prefix + "done";
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = t; i < clients; i += threads) {
        auto& s = *stores[static_cast<std::size_t>(i)];
        if (s.add(count_key, 1) == clients) s.set(done_key, "1");
      }
      for (int i = t; i < clients; i += threads) stores[static_cast<std::size_t>(i)]->wait({done_key}, std::chrono::seconds(120));
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& th : pool) th.join();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("barrier clients=%d threads=%d ms=%.1f\n", clients, threads, ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("crun store benchmark client");
  std::string endpoint, op = "get";
  int clients = 1, ops = 20000, pipeline = 0;
  app.add_option("--endpoint", endpoint)->required();
  int threads_for_barrier = 64;
  app.add_option("--op", op)->check(CLI::IsMember({"set", "get", "add", "barrier"}));
  app.add_option("--clients", clients)->check(CLI::Range(1, 20000));
  app.add_option("--threads", threads_for_barrier)->check(CLI::Range(1, 1024));
  app.add_option("--ops", ops)->check(CLI::PositiveNumber);
  app.add_option("--pipeline", pipeline)->check(CLI::NonNegativeNumber);
  std::string transport = "tcp";
  app.add_option("--transport", transport)->check(CLI::IsMember({"tcp", "local"}));
  CLI11_PARSE(app, argc, argv);

  auto ep = crun::StoreEndpoint::parse(endpoint);
  crun::StoreClientOptions opt;
  opt.local_socket = transport == "local";
  if (op == "barrier") return barrier(ep, opt, clients, threads_for_barrier);
  if (clients > 1024) {
    std::fprintf(stderr, "store_bench: --clients above 1024 only with --op barrier\n");
    return 2;
  }
  std::vector<std::unique_ptr<crun::TcpStore>> stores;
  for (int i = 0; i < clients; ++i) {
    stores.push_back(std::make_unique<crun::TcpStore>(ep, opt));
    if (stores.back()->is_local() != (transport == "local")) {
      std::fprintf(stderr, "store_bench: %s: no local socket there\n", endpoint.c_str());
      return 1;
    }
    stores.back()->set("bench/key" + std::to_string(i), std::string(32, 'v'));
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  const std::string value(32, 'v');
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto& s = *stores[i];
      std::string key = "bench/key" + std::to_string(i);
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      if (pipeline > 0) {
        for (int done = 0; done < ops;) {
          auto p = s.pipeline();
          int n = std::min(pipeline, ops - done);
          for (int k = 0; k < n; ++k) {
            if (op == "set") p.set(key, value);
            else if (op == "get") p.get(key, std::chrono::seconds(10));
            else p.add("bench/ctr" + std::to_string(i), 1);
          }
          p.flush();
          done += n;
        }
        return;
      }
      for (int k = 0; k < ops; ++k) {
        if (op == "set") s.set(key, value);
        else if (op == "get") s.get(key, std::chrono::seconds(10));
        else s.add("bench/ctr" + std::to_string(i), 1);
      }
    });
  }
  while (ready.load() < clients) std::this_thread::yield();
  auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s clients=%d pipeline=%d ops_per_s=%.0f\n", op.c_str(), clients, pipeline,
              static_cast<double>(ops) * clients / secs);
  return 0;
}
