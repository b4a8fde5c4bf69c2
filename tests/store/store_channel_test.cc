// StoreChannel on a loop of a thread of the test's, and BlockingStoreChannel over it, against a
// real server or one played by hand: the hello and the first requests in one write, corked
// writes, connecting (or not), a refused hello, and blocking requests from several threads.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "store/blocking_store_channel.h"
#include "store/store_channel.h"
#include "store/store_connection.h"
#include "tests/support/hand_store_server.h"
#include "tests/support/loop_thread.h"
#include "tests/support/loopback_socket.h"
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

// A StoreChannel made, used and destroyed on `loop`'s thread.
struct LoopChannel {
  LoopChannel(LoopThread& l, std::unique_ptr<StoreConnection> made, const StoreEndpoint& ep, const StoreClientOptions& o,
              std::function<void(const std::string&)> lost, std::function<void()> connected = {})
      : loop(l) {
    auto given = std::make_shared<std::unique_ptr<StoreConnection>>(std::move(made));
    loop.run([&] { ch = std::make_unique<StoreChannel>(loop.io(), std::move(*given), ep, o, std::move(lost), std::move(connected)); });
  }
  ~LoopChannel() {
    loop.run([&] { ch.reset(); });
  }
  // What an asynchronous set failed with, when it is an E ("another error" if not).
  template <typename E>
  std::string failure_of_a_set() {
    auto failed = std::make_shared<std::promise<std::string>>();
    loop.run([&] {
      ch->set("k", "v", in(5s), [failed](std::exception_ptr e) {
        try {
          std::rethrow_exception(e);
        } catch (const E& x) {
          failed->set_value(x.what());
        } catch (const std::exception& x) {
          failed->set_value(std::string("another error: ") + x.what());
        }
      });
    });
    auto why = failed->get_future();
    REQUIRE(why.wait_for(5s) == std::future_status::ready);
    return why.get();
  }
  LoopThread& loop;
  std::unique_ptr<StoreChannel> ch;
};
}  // namespace

TEST_CASE("blocking requests from several threads on one channel each get their own reply", "[channel]") {
  ServerFixture f;
  LostLog lost;
  BlockingStoreChannel ch(f.endpoint(), {}, lost.callback());
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
  BlockingStoreChannel ch(f.endpoint(), {}, lost.callback());
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
  BlockingStoreChannel ch(f.endpoint(), {}, lost.callback());
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

TEST_CASE("a reply later than its deadline is dropped and the channel stays in step", "[channel]") {
  ServerFixture f;
  LostLog lost;
  BlockingStoreChannel ch(f.endpoint(), {}, lost.callback());
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
  BlockingStoreChannel ch(f->endpoint(), {}, lost.callback());
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

TEST_CASE("the first requests go out behind the hello before it is answered; a corked batch waits for its body's end", "[channel]") {
  HandStoreServer hand;
  LostLog lost;
  LoopThread loop;
  LoopChannel c(loop, nullptr, {"127.0.0.1", hand.listening.port}, {}, lost.callback());
  loop.run([&] {
    for (const char* key : {"a", "b", "c"}) c.ch->set(key, "v", in(5s), [](std::exception_ptr) {});
  });
  hand.accept_hello();
  CHECK(hand.frames(3) == 3);  // no round trip for the handshake: they came with or right after it
  hand.answer_hello();
  bool held = false;
  loop.run([&] {
    c.ch->corked([&] {
      c.ch->set("d", "v", in(5s), [](std::exception_ptr) {});
      c.ch->try_get("e", in(5s), [](std::exception_ptr, std::optional<std::string>) {});
      held = !hand.readable();  // held back until the body ends
    });
  });
  CHECK(held);
  CHECK(hand.readable());
  CHECK(hand.frames(2) == 2);
}

TEST_CASE("a store that cannot be reached fails every request with why, and is reported lost once", "[channel]") {
  LoopbackSocket refusing(LoopbackSocket::Mode::kBound);
  LostLog lost;
  StoreClientOptions o;
  o.connect_timeout = 200ms;
  BlockingStoreChannel ch({"127.0.0.1", refusing.port}, o, lost.callback());
  CHECK_THROWS_WITH(ch.set("k", "v", in(5s)), Catch::Contains("cannot connect"));
  REQUIRE(eventually([&] { return lost.count() == 1; }));
  CHECK_THROWS_AS(ch.set("k", "v", in(1s)), StoreConnectionError);  // and every later one, at once
  CHECK(lost.count() == 1);
}

TEST_CASE("the hello goes out with the first requests; a refused one fails them as a store never reached", "[channel]") {
  StoreServerOptions so;
  so.token = "right";
  ServerFixture f(so);
  LostLog lost;
  StoreClientOptions wrong;
  wrong.token = "wrong";
  BlockingStoreChannel ch(f.endpoint(), wrong, lost.callback());
  CHECK_THROWS_WITH(ch.set("k", "v", in(5s)), Catch::Contains("handshake refused"));
  REQUIRE(eventually([&] { return lost.count() == 1; }));
  CHECK_THROWS_AS(ch.set("k", "v", in(1s)), StoreRejected);  // and a later request, at once

  StoreClientOptions right;
  right.token = "right";
  BlockingStoreChannel good(f.endpoint(), right, lost.callback());
  good.set("k", "v", in(5s));  // its hello and this set shared one write
  CHECK(good.try_get("k", in(5s)) == "v");
  CHECK(lost.count() == 1);
}

TEST_CASE("a server at its limit answers and closes before the hello comes: its answer, not the failed send, says why", "[channel]") {
  StoreServerOptions so;
  so.max_connections = 1;
  ServerFixture f(so);
  LostLog lost;
  BlockingStoreChannel holder(f.endpoint(), {}, lost.callback());
  holder.set("k", "v", in(5s));  // the one connection the server allows
  auto made = StoreConnection::connect_once(f.endpoint(), {}, 5000ms);
  REQUIRE(made != nullptr);
  REQUIRE(eventually([&] { return f.server.stats().connections_dropped == 1; }));  // answered "full", closed
  // Bytes to a closed peer draw its reset: from then on every send fails (EPIPE), while the
  // answer waits unread. The channel's first write, hello and all, fails so.
  REQUIRE(eventually([&] {
    try {
      made->send("x", in(1s));
      return false;
    } catch (const StoreConnectionError&) {
      return true;
    }
  }));
  LoopThread loop;
  LoopChannel refused(loop, std::move(made), f.endpoint(), {}, lost.callback());
  CHECK_THAT(refused.failure_of_a_set<StoreRejected>(), Catch::Contains("server at its connection limit"));
  REQUIRE(eventually([&] { return lost.count() == 1; }));
  CHECK_FALSE(loop.run([&] { return refused.ch->reached(); }));
  CHECK_THROWS_AS(std::rethrow_exception(loop.run([&] { return refused.ch->failure(); })), StoreRejected);
  CHECK_THAT(refused.failure_of_a_set<StoreRejected>(), Catch::Contains("server at its connection limit"));  // at once
}

TEST_CASE("connect_once: a connection where a store listens, none where nobody does; a channel uses the one it is given", "[channel]") {
  {
    LoopbackSocket bound(LoopbackSocket::Mode::kBound);  // a rival server between its bind and its listen
    bool refused = false;
    CHECK(StoreConnection::connect_once({"127.0.0.1", bound.port}, {}, 5000ms, &refused) == nullptr);
    CHECK(refused);  // nobody listens: the caller may host (a timeout would not say so)
  }
  ServerFixture f;
  auto made = StoreConnection::connect_once(f.endpoint(), {}, 5000ms);
  REQUIRE(made != nullptr);
  LostLog lost;
  std::promise<void> connected;
  LoopThread loop;
  LoopChannel c(loop, std::move(made), {"127.0.0.1", 1}, {}, lost.callback(), [&] { connected.set_value(); });
  REQUIRE(connected.get_future().wait_for(10s) == std::future_status::ready);
  auto got = std::make_shared<std::promise<std::optional<std::string>>>();
  loop.run([&] {  // the handshake and requests over the given connection, not over port 1
    c.ch->set("k", "v", in(5s), [](std::exception_ptr) {});
    c.ch->try_get("k", in(5s), [got](std::exception_ptr, std::optional<std::string> v) { got->set_value(v); });
  });
  CHECK(got->get_future().get() == "v");
  CHECK(f.server.stats().connections_accepted == 1);
  CHECK(lost.count() == 0);
}
