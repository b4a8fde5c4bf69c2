// StoreChannel: one connection, several threads, a watch, against a real server.
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "store/store_channel.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {
StoreChannel::Clock::time_point in(std::chrono::milliseconds d) { return StoreChannel::Clock::now() + d; }

// Runs `call` on a thread of its own; `error` gets what it threw.
std::thread blocked(std::function<void()> call, std::string& error) {
  return std::thread([call = std::move(call), &error] {
    try {
      call();
    } catch (const StoreError& e) {
      error = e.what();
    }
  });
}

struct LostLog {
  std::mutex mu;
  std::vector<std::string> reasons;
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& why) {
      std::lock_guard lock(mu);
      reasons.push_back(why);
    };
  }
  std::size_t count() {
    std::lock_guard lock(mu);
    return reasons.size();
  }
};
}  // namespace

TEST_CASE("requests from several threads on one channel each get their own reply", "[channel]") {
  ServerFixture f;
  LostLog lost;
  StoreChannel ch(f.endpoint(), {}, lost.callback());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        ch.set(key, key + "=v", in(5s));
        if (ch.try_get(key, in(5s)) != key + "=v") wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(f.server.stats().open_connections == 1);
  CHECK(ch.list_keys("t2/", 1000, in(5s)).size() == 200);
  CHECK(lost.count() == 0);
}

TEST_CASE("a get parked at the server holds back no other request on the channel", "[channel]") {
  ServerFixture f;
  LostLog lost;
  StoreChannel ch(f.endpoint(), {}, lost.callback());
  std::string got;
  std::thread waiter([&] { got = ch.get("later", 30s, in(60s)); });
  REQUIRE(eventually([&] { return f.server.stats().parked_requests == 1; }));
  ch.set("other", "x", in(5s));  // answered while the get is parked
  CHECK(ch.try_get("other", in(5s)) == "x");
  CHECK(ch.try_get("later", in(5s)) == std::nullopt);
  ch.set("later", "now", in(5s));
  waiter.join();
  CHECK(got == "now");
}

TEST_CASE("a watch on the channel sees every change in order, beside requests", "[channel]") {
  ServerFixture f;
  LostLog lost;
  StoreChannel ch(f.endpoint(), {}, lost.callback());
  std::mutex mu;
  std::vector<std::string> seen;
  ch.watch("w/", [&](const StoreEvent& e) {
    std::lock_guard lock(mu);
    seen.push_back((e.kind == StoreEvent::Kind::kSet ? "set " : "delete ") + e.key + "=" + e.value);
  }, in(5s));
  auto other = f.client();
  for (int i = 0; i < 50; ++i) other->set("w/" + std::to_string(i % 5), std::to_string(i));
  other->remove("w/0");
  ch.set("w/own", "mine", in(5s));  // the channel's own write, seen by its own watch
  ch.set("elsewhere", "x", in(5s));  // not under the prefix
  REQUIRE(eventually([&] {
    std::lock_guard lock(mu);
    return seen.size() == 52;
  }));
  std::lock_guard lock(mu);
  for (int i = 0; i < 50; ++i) CHECK(seen[i] == "set w/" + std::to_string(i % 5) + "=" + std::to_string(i));
  CHECK(seen[50] == "delete w/0=");
  CHECK(seen[51] == "set w/own=mine");
}

TEST_CASE("a cancelled request fails at once and the channel goes on", "[channel]") {
  ServerFixture f;
  LostLog lost;
  StoreChannel ch(f.endpoint(), {}, lost.callback());
  std::atomic<bool> cancel{false};
  std::string error;
  std::thread waiter = blocked([&] { ch.get("never", 60s, in(120s), &cancel); }, error);
  REQUIRE(eventually([&] { return f.server.stats().parked_requests == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  cancel = true;
  ch.wake();
  waiter.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK_THAT(error, Catch::Contains("cancelled"));
  CHECK_THROWS_WITH(ch.set("k", "v", in(5s), &cancel), Catch::Contains("cancelled"));  // and stays so for it
  ch.set("k", "v", in(5s));  // others go on
  CHECK(ch.try_get("k", in(5s)) == "v");
  CHECK(lost.count() == 0);
}

TEST_CASE("a reply later than its deadline is dropped and the channel stays in step", "[channel]") {
  ServerFixture f;
  LostLog lost;
  StoreChannel ch(f.endpoint(), {}, lost.callback());
  CHECK_THROWS_AS(ch.get("slow", 1s, in(100ms)), StoreTimeout);  // the server answers (timeout) at 1 s
  ch.set("k", "v", in(5s));
  CHECK(ch.try_get("k", in(5s)) == "v");
  // The late answer to the first get arrives meanwhile, finds nobody, and changes nothing.
  REQUIRE(eventually([&] { return f.server.stats().parked_requests == 0; }, 5s));
  CHECK(ch.try_get("k", in(5s)) == "v");
  CHECK_THROWS_AS(ch.get("absent", 0ms, in(5s)), StoreTimeout);  // the server's own timeout status
  CHECK(lost.count() == 0);
}

TEST_CASE("a server that goes away fails the waiting request and is reported lost once", "[channel]") {
  auto f = std::make_unique<ServerFixture>();
  LostLog lost;
  StoreChannel ch(f->endpoint(), {}, lost.callback());
  std::string error;
  std::thread waiter = blocked([&] { ch.get("never", 60s, in(120s)); }, error);
  REQUIRE(eventually([&] { return f->server.stats().parked_requests == 1; }));
  f.reset();
  waiter.join();
  CHECK_THAT(error, Catch::Contains("closed the connection"));
  REQUIRE(eventually([&] { return lost.count() == 1; }));
  CHECK_THROWS_AS(ch.set("k", "v", in(1s)), StoreConnectionError);  // unusable from then on, never hangs
  CHECK(lost.count() == 1);
}
