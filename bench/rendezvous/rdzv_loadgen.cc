// rdzv_loadgen: N simulated nodes rendezvous through one store and one coordinator.
//   rdzv_loadgen --nodes 10000 [--connections 16]
// The store server and the coordinator run in this process, as in the agent that hosts them.
// Simulated nodes share `--connections` client connections, each pipelining its nodes' join
// records and blocking answer gets, so 10,000 nodes need no 10,000 sockets. Prints the time from
// the first join to the last answer, and checks every node got a distinct rank.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "rendezvous/rendezvous_coordinator.h"
#include "store/store_server.h"

using namespace crun;

int main(int argc, char** argv) {
  CLI::App app("simulated rendezvous load");
  int nodes = 10000, connections = 16;
  app.add_option("--nodes", nodes)->check(CLI::Range(1, 100000));
  app.add_option("--connections", connections)->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  StoreServerOptions so;
  so.max_pending_per_connection = static_cast<std::size_t>(nodes / connections + 16);
  StoreServer server(so);
  server.start();
  StoreEndpoint ep{"127.0.0.1", server.port()};
  RendezvousConfig cfg;
  cfg.run_id = "loadgen";
  cfg.min_nodes = cfg.max_nodes = nodes;
  cfg.heartbeat_timeout = std::chrono::minutes(10);  // simulated nodes send no heartbeats
  RendezvousCoordinator coordinator(ep, {}, cfg, [](const std::string&) {});
  RendezvousKeys keys(cfg.run_id);

  std::vector<std::unique_ptr<TcpStore>> clients;
  StoreClientOptions remote;  // the simulated nodes stand for other hosts: TCP, as theirs would be
  remote.local_socket = false;
  for (int c = 0; c < connections; ++c) clients.push_back(std::make_unique<TcpStore>(ep, remote));
  std::vector<std::vector<std::string>> answers(connections);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      while (!go.load()) std::this_thread::yield();
      auto p = clients[c]->pipeline();
      std::vector<int> mine;
      for (int n = c; n < nodes; n += connections) mine.push_back(n);
      for (int n : mine) {
        NodeRecord r;
        r.node_id = "sim" + std::to_string(n);
        r.hostname = r.node_id;
        r.addr = "10.0." + std::to_string(n / 250) + "." + std::to_string(n % 250 + 1);
        r.free_port = 29500;
        r.seq = 1;
        r.min_nodes = r.max_nodes = nodes;
        r.program = "sim";
        p.set(keys.join(r.node_id), r.to_json());
      }
      for (int n : mine) p.get(keys.answer("sim" + std::to_string(n), 1), std::chrono::seconds(120));
      auto results = p.flush();
      answers[c].assign(results.begin() + static_cast<long>(mine.size()), results.end());
    });
  }
  auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::set<int> ranks;
  for (auto& per : answers)
    for (auto& a : per) ranks.insert(RoundAnswer::from_json(a).node_rank);
  bool ok = static_cast<int>(ranks.size()) == nodes && *ranks.begin() == 0 && *ranks.rbegin() == nodes - 1;
  std::printf("simulated nodes=%d connections=%d seconds=%.3f ranks=%s\n", nodes, connections, secs, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
