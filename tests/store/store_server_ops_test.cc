// Every store operation through the real client against a real server on loopback.
#include <catch2/catch.hpp>
#include <thread>

#include "store/prefix_store.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

TEST_CASE("set, get, try_get, remove and check", "[ops]") {
  ServerFixture f;
  auto c = f.client();
  c->set("a", "1");
  c->set("b", std::string("\0bin\xff", 5));
  CHECK(c->get("a", 1s) == "1");
  CHECK(c->get("b", 1s) == std::string("\0bin\xff", 5));
  c->set("a", "overwritten");
  CHECK(c->get("a", 1s) == "overwritten");
  CHECK(c->try_get("a") == std::optional<std::string>("overwritten"));
  CHECK_FALSE(c->try_get("zzz").has_value());
  CHECK(c->check({"a", "b"}));
  CHECK_FALSE(c->check({"a", "zzz"}));
  CHECK(c->remove("a"));
  CHECK_FALSE(c->remove("a"));
  CHECK_FALSE(c->check({"a"}));
  c->set("empty", "");
  CHECK(c->get("empty", 1s).empty());
  c->ping();
}

TEST_CASE("add is an atomic int64 counter on decimal text", "[ops]") {
  ServerFixture f;
  auto c = f.client();
  CHECK(c->add("n", 5) == 5);
  CHECK(c->add("n", -7) == -2);
  CHECK(c->get("n", 1s) == "-2");
  c->set("m", "40");
  CHECK(c->add("m", 2) == 42);
  c->set("text", "forty");
  try {
    c->add("text", 1);
    FAIL("add on text must be rejected");
  } catch (const StoreRejected& e) {
    CHECK(e.code() == static_cast<int>(wire::Status::kNotInteger));
    CHECK_THAT(e.what(), Catch::Contains("text") && Catch::Contains("not a decimal integer"));
  }
  // The connection stays usable after a rejected request.
  CHECK(c->add("n", 2) == 0);
}

TEST_CASE("compare_set swaps only on a match", "[ops]") {
  ServerFixture f;
  auto c = f.client();
  CHECK(c->compare_set("k", "", "first") == "first");       // missing key matches empty expected
  CHECK(c->compare_set("k", "", "second") == "first");      // no longer missing: no swap
  CHECK(c->compare_set("k", "first", "third") == "third");  // match: swap
  CHECK(c->compare_set("k", "nope", "x") == "third");
  CHECK(c->compare_set("absent", "something", "x").empty());  // missing, non-empty expected: nothing
  CHECK_FALSE(c->check({"absent"}));
}

TEST_CASE("multi_set, multi_get, append, num_keys and list_keys", "[ops]") {
  ServerFixture f;
  auto c = f.client();
  c->multi_set({"x/1", "x/2", "y/1"}, {"a", "b", "c"});
  CHECK(c->multi_get({"y/1", "x/1", "x/2"}, 1s) == std::vector<std::string>{"c", "a", "b"});
  CHECK(c->num_keys() == 3);
  CHECK(c->num_keys("x/") == 2);
  CHECK(c->list_keys("x/", 10) == std::vector<std::string>{"x/1", "x/2"});
  CHECK(c->list_keys("", 2).size() == 2);
  CHECK(c->append("log", "ab") == 2);
  CHECK(c->append("log", "cde") == 5);
  CHECK(c->get("log", 1s) == "abcde");
  CHECK_THROWS_AS(c->multi_set({"a"}, {}), std::invalid_argument);
}

TEST_CASE("blocking reads time out with a clear error and the client stays usable", "[ops][timeout]") {
  ServerFixture f;
  auto c = f.client();
  auto t0 = std::chrono::steady_clock::now();
  try {
    c->get("never", 200ms);
    FAIL("get of a missing key must time out");
  } catch (const StoreTimeout& e) {
    CHECK_THAT(e.what(), Catch::Contains("never") && Catch::Contains("127.0.0.1"));
  }
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 200ms);
  CHECK(waited < 5s);
  CHECK_THROWS_AS(c->wait({"never", "either"}, 100ms), StoreTimeout);
  CHECK_THROWS_AS(c->multi_get({"never"}, 100ms), StoreTimeout);
  CHECK_THROWS_AS(c->get("never", 0ms), StoreTimeout);
  c->set("now", "here");
  CHECK(c->get("now", 0ms) == "here");
}

TEST_CASE("a blocking get is released by another client's set", "[ops][blocking]") {
  ServerFixture f;
  auto waiter = f.client();
  auto writer = f.client();
  std::string got;
  std::thread t([&] { got = waiter->get("late", 10s); });
  // The waiter is parked on the server before the set: prove it by waiting for that state.
  REQUIRE(eventually([&] { return f.server.stats().parked_requests == 1; }));
  writer->set("late", "value");
  t.join();
  CHECK(got == "value");

  // wait() and multi_get() complete only when the last of their keys appears.
  std::vector<std::string> values;
  std::thread t2([&] { values = waiter->multi_get({"p", "q"}, 10s); });
  writer->set("p", "1");
  writer->set("q", "2");
  t2.join();
  CHECK(values == std::vector<std::string>{"1", "2"});
}

TEST_CASE("watch pushes sets and deletes under a prefix", "[ops][watch]") {
  ServerFixture f;
  auto c = f.client();
  EventQueue<StoreEvent> events;
  EventQueue<std::string> lost;
  auto w = c->watch("fail/", [&](const StoreEvent& e) { events.push(e); }, [&](const std::string& r) { lost.push(r); });
  c->set("other/x", "ignored");
  c->set("fail/node1", "exit 3");
  c->add("fail/count", 1);
  c->remove("fail/node1");
  auto e1 = events.pop();
  REQUIRE(e1);
  CHECK(e1->kind == StoreEvent::Kind::kSet);
  CHECK(e1->key == "fail/node1");
  CHECK(e1->value == "exit 3");
  auto e2 = events.pop();
  REQUIRE(e2);
  CHECK(e2->key == "fail/count");
  CHECK(e2->value == "1");
  auto e3 = events.pop();
  REQUIRE(e3);
  CHECK(e3->kind == StoreEvent::Kind::kDelete);
  CHECK(e3->key == "fail/node1");
  CHECK(events.size() == 0);  // "other/x" was not delivered

  // Destroying the watch stops delivery and does not report a loss.
  w.reset();
  c->set("fail/after", "x");
  c->ping();
  CHECK(events.size() == 0);
  CHECK(lost.size() == 0);
}

TEST_CASE("a watch reports the loss of its server", "[ops][watch]") {
  auto f = std::make_unique<ServerFixture>();
  auto c = f->client();
  EventQueue<std::string> lost;
  auto w = c->watch("", [](const StoreEvent&) {}, [&](const std::string& r) { lost.push(r); });
  f->server.stop();
  auto reason = lost.pop(10s);
  REQUIRE(reason);
  CHECK_THAT(*reason, Catch::Contains("127.0.0.1"));
}

TEST_CASE("prefix views isolate namespaces", "[ops][prefix]") {
  ServerFixture f;
  auto c = f.client();
  PrefixStore round1(*c, "job/round1");
  PrefixStore round2(*c, "job/round2/");
  round1.set("master", "10.0.0.1");
  round2.set("master", "10.0.0.2");
  round1.add("count", 3);
  CHECK(round1.get("master", 1s) == "10.0.0.1");
  CHECK(round2.get("master", 1s) == "10.0.0.2");
  CHECK(c->get("job/round1/master", 1s) == "10.0.0.1");
  CHECK(round1.num_keys() == 2);
  CHECK(round2.num_keys() == 1);
  CHECK(round1.list_keys("", 10) == std::vector<std::string>{"count", "master"});
  CHECK_FALSE(round2.check({"count"}));
  CHECK_THROWS_AS(round2.get("count", 50ms), StoreTimeout);
  PrefixStore nested(round1, "inner");
  nested.set("k", "v");
  CHECK(c->get("job/round1/inner/k", 1s) == "v");
}

TEST_CASE("pipelined requests return in order", "[ops][pipeline]") {
  ServerFixture f;
  auto c = f.client();
  auto p = c->pipeline();
  for (int i = 0; i < 100; ++i) p.set("k" + std::to_string(i), std::to_string(i));
  for (int i = 0; i < 100; ++i) p.get("k" + std::to_string(i), 1s);
  p.add("ctr", 7);
  auto results = p.flush();
  REQUIRE(results.size() == 201);
  CHECK(results[0].empty());
  CHECK(results[100] == "0");
  CHECK(results[199] == "99");
  CHECK(results[200] == "7");
  auto q = c->pipeline();
  q.remove("k0");
  q.remove("k0");
  q.remove("k1");
  CHECK(q.flush() == std::vector<std::string>{"1", "0", "1"});
  CHECK(c->num_keys("k") == 98);
}

TEST_CASE("endpoint parsing names what is wrong", "[ops][endpoint]") {
  CHECK(StoreEndpoint::parse("10.1.2.3:29500").port == 29500);
  CHECK(StoreEndpoint::parse("[::1]:80").host == "::1");
  CHECK(StoreEndpoint::parse("node-1:0").str() == "node-1:0");
  CHECK_THROWS_WITH(StoreEndpoint::parse("host"), Catch::Contains("'host'") && Catch::Contains("no port"));
  CHECK_THROWS_AS(StoreEndpoint::parse("host:99999"), std::invalid_argument);
  CHECK_THROWS_AS(StoreEndpoint::parse(":80"), std::invalid_argument);
  CHECK_THROWS_AS(StoreEndpoint::parse("::1:80"), std::invalid_argument);
}

TEST_CASE("ephemeral keys vanish with their connection", "[ops][ephemeral]") {
  ServerFixture f;
  auto observer = f.client();
  EventQueue<StoreEvent> events;
  auto w = observer->watch("alive/", [&](const StoreEvent& e) { events.push(e); });
  auto node = f.client();
  node->set_ephemeral("alive/node1", "pid 42");
  node->set_ephemeral("alive/node2", "pid 43");
  observer->set("alive/node2", "taken over");  // a later plain write ends node's ownership
  CHECK(observer->get("alive/node1", 1s) == "pid 42");
  REQUIRE(events.pop());  // set node1
  REQUIRE(events.pop());  // set node2
  REQUIRE(events.pop());  // set node2 by observer
  node.reset();           // the connection closes: the server deletes what node still owns
  auto gone = events.pop();
  REQUIRE(gone);
  CHECK(gone->kind == StoreEvent::Kind::kDelete);
  CHECK(gone->key == "alive/node1");
  CHECK_FALSE(observer->try_get("alive/node1").has_value());
  CHECK(observer->get("alive/node2", 1s) == "taken over");
}
