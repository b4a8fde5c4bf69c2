// store/store_keyspace: the store's data, parked requests and watches, driven directly (no
// session, no socket).
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "store/store_keyspace.h"

using namespace crun;

namespace {

struct Parked final : ParkedRequest {
  explicit Parked(std::vector<std::string> k) { keys = std::move(k); }
  int calls = 0;
  void ready() override { ++calls; }
};

struct Recorder final : Watch {
  explicit Recorder(std::string p) { prefix = std::move(p); }
  std::vector<std::string> seen;  // "set k=v" / "del k"
  std::function<void()> during;   // run inside the first notification
  void changed(std::uint8_t kind, const std::string& key, const std::string* value) override {
    seen.push_back(kind == 1 ? "set " + key + "=" + *value : "del " + key);
    if (during) std::exchange(during, nullptr)();
  }
};

}  // namespace

TEST_CASE("values, counters, compare-and-set, append, prefix counts and listings", "[keyspace]") {
  KeySpace ks;
  ks.set("a/1", "x");
  ks.set("a/2", "y");
  ks.set("b", "z");
  REQUIRE(ks.find("a/1") != nullptr);
  CHECK(*ks.find("a/1") == "x");
  CHECK(ks.find("nope") == nullptr);
  CHECK(ks.has_all({"a/1", "b"}));
  CHECK_FALSE(ks.has_all({"a/1", "c"}));
  CHECK(ks.count("a/") == 2);
  CHECK(ks.count("") == 3);
  CHECK(ks.list("a/", 10) == std::vector<std::string>{"a/1", "a/2"});
  CHECK(ks.list("", 2).size() == 2);  // bounded by the limit

  CHECK(ks.add("n", 5) == 5);  // a missing counter starts at 0
  CHECK(ks.add("n", -7) == -2);
  CHECK_THROWS_AS(ks.add("b", 1), std::invalid_argument);  // "z" is not a number

  CHECK(ks.compare_set("c", "", "first") == "first");  // absent and expected "": created
  CHECK(ks.compare_set("c", "wrong", "second") == "first");  // mismatch: the present value
  CHECK(ks.compare_set("c", "first", "second") == "second");

  CHECK(ks.append("log", "ab", 4) == 2);
  CHECK(ks.append("log", "cd", 4) == 4);
  CHECK_THROWS_AS(ks.append("log", "e", 4), std::length_error);
  CHECK(*ks.find("log") == "abcd");

  CHECK(ks.remove("a/1"));
  CHECK_FALSE(ks.remove("a/1"));
  CHECK(ks.count("a/") == 1);
}

TEST_CASE("a parked request is ready exactly once, when the last of its keys appears", "[keyspace]") {
  KeySpace ks;
  ks.set("k1", "v");
  auto req = std::make_shared<Parked>(std::vector<std::string>{"k1", "k2", "k3"});
  ks.park(req);
  CHECK(ks.parked_keys() == 2);  // parked only on the keys it still misses
  ks.set("k2", "v");
  CHECK(req->calls == 0);
  ks.set("k3", "v");
  CHECK(req->calls == 1);
  ks.set("k3", "again");
  CHECK(req->calls == 1);

  auto gone = std::make_shared<Parked>(std::vector<std::string>{"later"});
  ks.park(gone);
  ks.unpark(gone);
  CHECK(ks.parked_keys() == 0);
  ks.set("later", "v");
  CHECK(gone->calls == 0);
}

TEST_CASE("watches see sets and deletes under their prefix, after the mutation", "[keyspace]") {
  KeySpace ks;
  auto all = std::make_shared<Recorder>("");
  auto jobs = std::make_shared<Recorder>("job/");
  ks.add_watch(all);
  ks.add_watch(jobs);
  ks.set("job/1", "a");
  ks.set("other", "b");
  ks.remove("job/1");
  ks.add("job/n", 2);
  CHECK(all->seen == std::vector<std::string>{"set job/1=a", "set other=b", "del job/1", "set job/n=2"});
  CHECK(jobs->seen == std::vector<std::string>{"set job/1=a", "del job/1", "set job/n=2"});
  ks.remove_watch(jobs);
  ks.set("job/2", "c");
  CHECK(jobs->seen.size() == 3);
  CHECK(jobs->removed);
}

TEST_CASE("ephemeral keys go with their owner; a later plain write takes a key over", "[keyspace]") {
  KeySpace ks;
  ks.set_owned("alive/a", "1", 7);
  ks.set_owned("alive/b", "1", 7);
  ks.set("alive/b", "mine now");  // another writer: no longer owner 7's
  ks.release(7, {"alive/a", "alive/b"});
  CHECK(ks.find("alive/a") == nullptr);
  REQUIRE(ks.find("alive/b") != nullptr);
  CHECK(*ks.find("alive/b") == "mine now");
}

TEST_CASE("inside a notification: release is deferred, other mutations are refused", "[keyspace]") {
  KeySpace ks;
  ks.set_owned("eph", "value", 9);
  auto watch = std::make_shared<Recorder>("");
  bool refused = false;
  watch->during = [&] {
    CHECK(ks.notifying());
    ks.release(9, {"eph"});  // a connection closing while it is notified
    CHECK(ks.find("eph") != nullptr);  // the value being notified stays valid
    try {
      ks.set("x", "y");
    } catch (const std::logic_error&) {
      refused = true;
    }
  };
  ks.add_watch(watch);
  ks.set("trigger", "t");
  CHECK(refused);
  CHECK_FALSE(ks.notifying());
  CHECK(ks.find("eph") == nullptr);  // released once the notification ended
  CHECK(watch->seen == std::vector<std::string>{"set trigger=t", "del eph"});
}

TEST_CASE("a large value is shared: a reference keeps its bytes through writes and deletes", "[keyspace]") {
  KeySpace ks;
  const std::string big(SharedValue::kShareFrom, 'a');
  std::shared_ptr<const SharedValue> small_ref;
  ks.set("small", "x");
  REQUIRE(ks.find("small", small_ref) != nullptr);
  CHECK_FALSE(small_ref);  // small values are copied, not shared

  ks.set("k", big);
  std::shared_ptr<const SharedValue> ref;
  const std::string* v = ks.find("k", ref);
  REQUIRE(ref);
  CHECK(v == &ref->bytes);
  ks.set("k", std::string(SharedValue::kShareFrom, 'b'));  // referenced: new bytes
  CHECK(ref->bytes == big);
  CHECK(*ks.find("k") == std::string(SharedValue::kShareFrom, 'b'));
  ks.append("k", "c", 1 << 20);
  CHECK(ref->bytes == big);
  CHECK(ks.find("k")->size() == SharedValue::kShareFrom + 1);

  std::shared_ptr<const SharedValue> second;
  ks.find("k", second);
  const SharedValue* before = second.get();
  second.reset();
  ks.append("k", "d", 1 << 20);  // nothing else references it: grown in place
  std::shared_ptr<const SharedValue> third;
  ks.find("k", third);
  CHECK(third.get() == before);
  CHECK(third->bytes.back() == 'd');

  ks.remove("k");
  CHECK(third->bytes.size() == SharedValue::kShareFrom + 2);
  ks.set("k", "short again");
  std::shared_ptr<const SharedValue> none;
  CHECK(*ks.find("k", none) == "short again");
  CHECK_FALSE(none);
  ks.append("grows", std::string(SharedValue::kShareFrom - 1, 'e'), 1 << 20);
  ks.append("grows", "f", 1 << 20);  // crosses into shared
  std::shared_ptr<const SharedValue> grown;
  REQUIRE(ks.find("grows", grown) != nullptr);
  REQUIRE(grown);
  CHECK(grown->bytes.size() == SharedValue::kShareFrom);
}
