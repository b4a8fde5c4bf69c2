// Many clients at once: compare_set races, counters, 1,000 concurrent connections.
#include <sys/resource.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

TEST_CASE("compare_set races from many clients elect exactly one winner", "[concurrency]") {
  ServerFixture f;
  constexpr int kClients = 16;
  std::vector<std::string> seen(kClients);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  std::atomic<int> late{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = f.client();
      ready.fetch_add(1);
      // Start together (bounded: a client that never connects fails the test, not the run).
      if (!eventually([&] { return ready.load() >= kClients; })) late.fetch_add(1);
      seen[i] = c->compare_set("leader", "", "client" + std::to_string(i));
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(late.load() == 0);
  std::set<std::string> distinct(seen.begin(), seen.end());
  CHECK(distinct.size() == 1);  // everyone sees the same winner
  auto c = f.client();
  CHECK(c->get("leader", 1s) == *distinct.begin());
}

TEST_CASE("compare_set increments from racing clients lose no update", "[concurrency]") {
  ServerFixture f;
  constexpr int kClients = 8, kIncrements = 200;
  std::vector<std::thread> threads;
  std::atomic<long> retries{0};
  // Values are "<count>:<writer>:<n>", unique per attempt, so the value compare_set returns tells
  // the caller whether its own write won.
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = f.client();
      for (int n = 0; n < kIncrements; ++n) {
        for (int attempt = 0; attempt < 100000; ++attempt) {  // bounded retry loop
          auto cur = c->try_get("counter").value_or("");
          long count = cur.empty() ? 0 : std::stol(cur.substr(0, cur.find(':')));
          std::string next = std::to_string(count + 1) + ":" + std::to_string(i) + ":" + std::to_string(n);
          if (c->compare_set("counter", cur, next) == next) break;
          retries.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto c = f.client();
  auto final_value = c->get("counter", 1s);
  CHECK(final_value.substr(0, final_value.find(':')) == std::to_string(kClients * kIncrements));
  INFO("compare_set retries: " << retries.load());
}

TEST_CASE("add from many clients is atomic", "[concurrency]") {
  ServerFixture f;
  constexpr int kClients = 16, kAdds = 500;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto c = f.client();
      for (int n = 0; n < kAdds; ++n) c->add("hits", 1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(f.client()->get("hits", 1s) == std::to_string(kClients * kAdds));
}

TEST_CASE("1,000 concurrent clients are all served", "[concurrency][scale]") {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 4096 && lim.rlim_max >= 4096) {
    lim.rlim_cur = 4096;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  getrlimit(RLIMIT_NOFILE, &lim);
  REQUIRE(lim.rlim_cur >= 2200);  // 1,000 client + 1,000 server sockets in this process

  ServerFixture f;
  constexpr int kThreads = 8, kPerThread = 125;  // 1,000 connections held open together
  std::vector<std::vector<std::unique_ptr<TcpStore>>> clients(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> connected{0};
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kPerThread; ++i) clients[t].push_back(f.client());
        connected.fetch_add(kPerThread);
        if (!eventually([&] { return connected.load() >= kThreads * kPerThread; }, 30s)) {
          throw std::runtime_error("not every client connected within 30 s");
        }
        // Round 1: every client writes its own key and bumps a shared counter.
        for (int i = 0; i < kPerThread; ++i) {
          auto& c = clients[t][i];
          c->set("node/" + std::to_string(t * kPerThread + i), "up");
          c->add("joined", 1);
        }
        // Round 2: every client waits for the counter to reach 1,000 through a blocking get.
        for (int i = 0; i < kPerThread; ++i) clients[t][i]->wait({"node/999", "node/0"}, 30s);
      } catch (const std::exception& e) {
        failures.fetch_add(1);
        UNSCOPED_INFO(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  auto probe = f.client();
  CHECK(probe->get("joined", 1s) == "1000");
  CHECK(probe->num_keys("node/") == 1000);
  CHECK(f.server.stats().open_connections == 1001);
}
