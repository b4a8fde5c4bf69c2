// StoreChannel on an event loop run by the test's own thread, against a real server: requests,
// replies, a watch, the timer and deadlines all on the loop's thread; failures reported there.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/store_channel.h"
#include "store/store_connection.h"
#include "tests/support/eventually.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {
StoreChannel::Clock::time_point in(std::chrono::milliseconds d) { return StoreChannel::Clock::now() + d; }

// Runs the loop on this thread until `done` holds or `bound` passes; returns `done()`.
bool run_until(boost::asio::io_context& io, const std::function<bool()>& done, std::chrono::milliseconds bound = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(50));
  }
  return done();
}

std::unique_ptr<StoreConnection> connect(const ServerFixture& f, const StoreClientOptions& o = {}) {
  auto made = StoreConnection::connect_once(f.endpoint(), o, 5000ms);
  REQUIRE(made != nullptr);
  return made;
}

// Every callback's name and whether it ran on the loop's (this) thread.
struct Log {
  std::vector<std::string> what;
  bool off_loop = false;
  void note(const std::string& w) {
    what.push_back(w);
    if (std::this_thread::get_id() != test_thread) off_loop = true;
  }
  std::thread::id test_thread = std::this_thread::get_id();
};
}  // namespace

TEST_CASE("on a loop: replies, a watch's events and the timer run on the loop's thread, in order; a missed deadline fails alone", "[channel_loop]") {
  ServerFixture f;
  boost::asio::io_context io;
  Log log;
  std::vector<std::string> lost;
  bool connected = false;
  StoreChannel ch(io, connect(f), f.endpoint(), {}, [&](const std::string& why) { lost.push_back(why); },
                  [&] { connected = true; });
  // Requests made before the loop ran go out behind the hello, in one write.
  ch.watch("w/", [&](const StoreEvent& e) { log.note("event " + e.key + "=" + e.value); }, in(5s),
           [&](std::exception_ptr e) { log.note(e ? "watch failed" : "watch"); });
  ch.get("slow", 5000ms, in(500ms), [&](std::exception_ptr e, std::optional<std::string>) {
    try {
      if (e) std::rethrow_exception(e);
      log.note("get answered");
    } catch (const StoreTimeout&) {
      log.note("get timed out");
    } catch (...) {
      log.note("get failed otherwise");
    }
  });
  ch.set("w/k", "v", in(5s), [&](std::exception_ptr e) { log.note(e ? "set failed" : "set"); });
  ch.try_get("w/k", in(5s), [&](std::exception_ptr, std::optional<std::string> v) { log.note("try_get " + v.value_or("-")); });
  ch.list_keys("w/", 10, in(5s), [&](std::exception_ptr, std::vector<std::string> keys) {
    log.note("list " + std::to_string(keys.size()));
  });
  CHECK_FALSE(connected);  // nothing runs before the loop does
  REQUIRE(run_until(io, [&] { return log.what.size() == 6; }));
  CHECK(connected);
  CHECK(ch.reached());
  // Nothing else wakes the loop for the get's deadline: the channel's own timer does.
  CHECK(log.what == std::vector<std::string>{"watch", "set", "event w/k=v", "try_get v", "list 1", "get timed out"});
  bool ticked = false;
  ch.at(StoreChannel::Clock::now() + 100ms, [&] {
    ticked = true;
    log.note("tick");
  });
  auto other = f.client();
  other->set("w/other", "x");  // another client's change reaches the watch on the loop
  REQUIRE(run_until(io, [&] { return ticked && log.what.size() == 8; }));
  CHECK_FALSE(log.off_loop);
  CHECK(lost.empty());
}

TEST_CASE("on a loop: a server that goes away fails what waits and is reported lost once, on the loop", "[channel_loop]") {
  auto f = std::make_unique<ServerFixture>();
  boost::asio::io_context io;
  Log log;
  std::vector<std::string> lost;
  StoreChannel ch(io, connect(*f), f->endpoint(), {}, [&](const std::string& why) {
    lost.push_back(why);
    log.note("lost");
  });
  ch.get("never", 60000ms, in(120s), [&](std::exception_ptr e, std::optional<std::string>) {
    try {
      std::rethrow_exception(e);
    } catch (const StoreConnectionError& x) {
      log.note(std::string("get: ") + x.what());
    } catch (...) {
      log.note("get failed otherwise");
    }
  });
  REQUIRE(run_until(io, [&] { return f->server.stats().parked_requests == 1; }));
  f.reset();
  REQUIRE(run_until(io, [&] { return lost.size() == 1; }));
  REQUIRE(log.what.size() == 2);
  CHECK_THAT(log.what[0], Catch::Contains("closed the connection"));
  CHECK(log.what[1] == "lost");
  bool failed_at_once = false;
  ch.set("k", "v", in(1s), [&](std::exception_ptr e) { failed_at_once = e != nullptr; });
  CHECK(failed_at_once);  // unusable from then on, never waits
  run_until(io, [] { return false; }, 200ms);
  CHECK(lost.size() == 1);
  CHECK_FALSE(log.off_loop);
}

TEST_CASE("on a loop: a refused hello fails the requests as a store never reached", "[channel_loop]") {
  StoreServerOptions so;
  so.token = "right";
  ServerFixture f(so);
  boost::asio::io_context io;
  StoreClientOptions wrong;
  wrong.token = "wrong";
  std::vector<std::string> lost;
  std::string why;
  StoreChannel ch(io, connect(f, wrong), f.endpoint(), wrong, [&](const std::string& w) { lost.push_back(w); });
  ch.set("k", "v", in(5s), [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const StoreRejected& x) {
      why = x.what();
    } catch (const std::exception& x) {
      why = std::string("another error: ") + x.what();
    }
  });
  REQUIRE(run_until(io, [&] { return lost.size() == 1; }));
  CHECK_THAT(why, Catch::Contains("handshake refused"));
  CHECK_FALSE(ch.reached());
  CHECK_THROWS_AS(std::rethrow_exception(ch.failure()), StoreRejected);
}

TEST_CASE("on a loop: a channel destroyed with requests waiting runs no callback after", "[channel_loop]") {
  ServerFixture f;
  boost::asio::io_context io;
  int callbacks = 0;
  {
    StoreChannel ch(io, connect(f), f.endpoint(), {}, [&](const std::string&) { ++callbacks; });
    ch.get("never", 60000ms, in(120s), [&](std::exception_ptr, std::optional<std::string>) { ++callbacks; });
    ch.at(StoreChannel::Clock::now() + 50ms, [&] { ++callbacks; });
    REQUIRE(run_until(io, [&] { return f.server.stats().parked_requests == 1; }));
  }
  run_until(io, [] { return false; }, 300ms);  // past the timer; what was queued finds it gone
  CHECK(callbacks == 0);
  CHECK(eventually([&] { return f.server.stats().parked_requests == 0; }));  // its connection closed
}

TEST_CASE("on a loop: 2,000 notifications queued while the loop was idle all arrive, in order", "[channel_loop]") {
  ServerFixture f;
  boost::asio::io_context io;
  std::vector<std::string> seen;
  bool watching = false;
  StoreChannel ch(io, connect(f), f.endpoint(), {}, [](const std::string&) {});
  ch.watch("b/", [&](const StoreEvent& e) { seen.push_back(e.value); }, in(5s), [&](std::exception_ptr e) { watching = !e; });
  REQUIRE(run_until(io, [&] { return watching; }));
  auto other = f.client();
  for (int i = 0; i < 2000; ++i) other->set("b/k", std::to_string(i));  // queued at the server while the loop is idle
  REQUIRE(run_until(io, [&] { return seen.size() == 2000; }));
  for (int i = 0; i < 2000; ++i) CHECK(seen[static_cast<std::size_t>(i)] == std::to_string(i));
}
