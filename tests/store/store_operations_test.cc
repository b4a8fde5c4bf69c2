// store/store_operations: each store operation called directly on a KeySpace with decoded
// arguments; the reply is its status and the payload it wrote (no session, no frames, no socket).
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_operations.h"

using namespace crun;
using wire::Op;
using wire::Status;

namespace {

// One reply: the status an operation returned and a reader over the payload it wrote.
struct Reply {
  Status status = Status::kOk;
  std::string payload;
  wire::Reader reader() const { return wire::Reader(payload); }
  std::string message() const {
    auto r = reader();
    auto m = std::string(r.str());
    r.expect_done();
    return m;
  }
};

template <typename Run>
Reply call(Run&& run) {
  Reply rep;
  wire::Writer w(rep.payload);
  rep.status = run(w);
  return rep;
}

struct Parked final : ParkedRequest {
  explicit Parked(std::vector<std::string> k) { keys = std::move(k); }
  int calls = 0;
  void ready() override { ++calls; }
};

struct Recorder final : Watch {
  explicit Recorder(std::string p) { prefix = std::move(p); }
  std::vector<std::string> seen;
  void changed(std::uint8_t kind, const std::string& key, const std::string* value) override {
    seen.push_back(kind == 1 ? "set " + key + "=" + *value : "del " + key);
  }
};

const std::string kLongKey(kMaxKeyLength + 1, 'k');

}  // namespace

TEST_CASE("set, try_get, delete and check answer with the wire's payloads", "[operations]") {
  KeySpace keys;
  auto set = call([&](wire::Writer& w) { return store_ops::set(keys, "a", "1", w); });
  CHECK(set.status == Status::kOk);
  CHECK(set.payload.empty());

  auto found = call([&](wire::Writer& w) { return store_ops::try_get(keys, "a", w); });
  auto r = found.reader();
  CHECK(r.u8() == 1);
  CHECK(r.str() == "1");
  r.expect_done();

  auto absent = call([&](wire::Writer& w) { return store_ops::try_get(keys, "b", w); });
  r = absent.reader();
  CHECK(r.u8() == 0);
  CHECK(r.str().empty());

  auto all = call([&](wire::Writer& w) { return store_ops::check(keys, {"a"}, w); });
  CHECK(all.reader().u8() == 1);
  auto some = call([&](wire::Writer& w) { return store_ops::check(keys, {"a", "b"}, w); });
  CHECK(some.reader().u8() == 0);

  auto removed = call([&](wire::Writer& w) { return store_ops::remove(keys, "a", w); });
  CHECK(removed.reader().u8() == 1);
  auto again = call([&](wire::Writer& w) { return store_ops::remove(keys, "a", w); });
  CHECK(again.reader().u8() == 0);
  CHECK(keys.size() == 0);
}

TEST_CASE("a key or value over the limit is refused and changes nothing", "[operations]") {
  KeySpace keys;
  auto long_key = call([&](wire::Writer& w) { return store_ops::set(keys, kLongKey, "v", w); });
  CHECK(long_key.status == Status::kKeyTooLong);
  CHECK(long_key.message() == "key of 4097 bytes exceeds 4096");

  const std::string big(kMaxValueSize + 1, 'v');
  auto big_value = call([&](wire::Writer& w) { return store_ops::set(keys, "k", big, w); });
  CHECK(big_value.status == Status::kValueTooLarge);

  // multi_set checks every pair before it writes any.
  std::vector<std::pair<std::string_view, std::string_view>> items{{"x", "1"}, {kLongKey, "2"}};
  auto multi = call([&](wire::Writer& w) { return store_ops::multi_set(keys, items, w); });
  CHECK(multi.status == Status::kKeyTooLong);

  auto cas = call([&](wire::Writer& w) { return store_ops::compare_set(keys, "k", "", big, w); });
  CHECK(cas.status == Status::kValueTooLarge);
  CHECK(keys.size() == 0);

  std::vector<std::string> owned;
  auto eph = call([&](wire::Writer& w) { return store_ops::set_ephemeral(keys, kLongKey, "v", 7, owned, w); });
  CHECK(eph.status == Status::kKeyTooLong);
  CHECK(owned.empty());
}

TEST_CASE("multi_set, add, append, compare_set, num_keys and list_keys", "[operations]") {
  KeySpace keys;
  std::vector<std::pair<std::string_view, std::string_view>> items{{"p/b", "2"}, {"p/a", "1"}, {"q", "x"}};
  CHECK(call([&](wire::Writer& w) { return store_ops::multi_set(keys, items, w); }).status == Status::kOk);

  auto added = call([&](wire::Writer& w) { return store_ops::add(keys, "p/a", 41, w); });
  CHECK(added.reader().i64() == 42);
  auto not_int = call([&](wire::Writer& w) { return store_ops::add(keys, "q", 1, w); });
  CHECK(not_int.status == Status::kNotInteger);
  CHECK(*keys.find("q") == "x");

  auto appended = call([&](wire::Writer& w) { return store_ops::append(keys, "q", "yz", w); });
  CHECK(appended.reader().i64() == 3);

  auto swapped = call([&](wire::Writer& w) { return store_ops::compare_set(keys, "q", "xyz", "new", w); });
  CHECK(swapped.reader().str() == "new");
  auto kept = call([&](wire::Writer& w) { return store_ops::compare_set(keys, "q", "other", "no", w); });
  CHECK(kept.reader().str() == "new");

  auto count = call([&](wire::Writer& w) { return store_ops::num_keys(keys, "p/", w); });
  CHECK(count.reader().i64() == 2);

  auto listed = call([&](wire::Writer& w) { return store_ops::list_keys(keys, "p/", 1, w); });
  auto r = listed.reader();
  CHECK(r.u32() == 1);
  CHECK(r.str() == "p/a");
  r.expect_done();
}

TEST_CASE("set_ephemeral records the key once for its owner's release", "[operations]") {
  KeySpace keys;
  std::vector<std::string> owned;
  for (int i = 0; i < 2; ++i)
    CHECK(call([&](wire::Writer& w) { return store_ops::set_ephemeral(keys, "e", "v", 7, owned, w); }).status ==
          Status::kOk);
  CHECK(owned == std::vector<std::string>{"e"});
  keys.release(7, std::move(owned));
  CHECK(keys.find("e") == nullptr);
}

TEST_CASE("a blocking read answers now, times out at 0 ms, or must wait", "[operations]") {
  KeySpace keys;
  keys.set("a", "1");
  std::string payload;
  wire::Writer w(payload);

  auto now = store_ops::read_now(keys, Op::kMultiGet, {"a", "a"}, 100, w);
  REQUIRE(now == Status::kOk);
  wire::Reader r(payload);
  CHECK(r.u32() == 2);
  CHECK(r.str() == "1");
  CHECK(r.str() == "1");
  r.expect_done();

  payload.clear();
  CHECK(store_ops::read_now(keys, Op::kWait, {"a"}, 0, w) == Status::kOk);
  CHECK(payload.empty());

  CHECK(store_ops::read_now(keys, Op::kGet, {"b"}, 0, w) == Status::kTimeout);
  CHECK(wire::Reader(payload).str() == "key 'b' not set within 0 ms");

  payload.clear();
  CHECK(store_ops::read_now(keys, Op::kGet, {"b"}, 100, w) == std::nullopt);
  CHECK(payload.empty());  // nothing written: the caller parks it

  CHECK(store_ops::read_now(keys, Op::kWait, {"a", kLongKey}, 100, w) == Status::kKeyTooLong);
}

TEST_CASE("a read that waited is answered once ready, or names the missing key on timeout", "[operations]") {
  KeySpace keys;
  auto parked = std::make_shared<Parked>(std::vector<std::string>{"a", "b"});
  keys.park(parked);
  keys.set("a", "1");

  auto late = call([&](wire::Writer& w) {
    return store_ops::read_timed_out(keys, Op::kMultiGet, parked->keys, 250, w);
  });
  CHECK(late.status == Status::kTimeout);
  CHECK(late.message() == "multi_get: key 'b' not set within 250 ms");
  auto forever = call([&](wire::Writer& w) {
    return store_ops::read_timed_out(keys, Op::kWait, parked->keys, wire::kForever, w);
  });
  CHECK(forever.message() == "wait: key 'b' not set within forever");

  CHECK(call([&](wire::Writer& w) { return store_ops::set(keys, "b", "2", w); }).status == Status::kOk);
  CHECK(parked->calls == 1);
  auto ready = call([&](wire::Writer& w) { return store_ops::read_ready(keys, Op::kGet, {"b"}, w); });
  CHECK(ready.reader().str() == "2");
}

TEST_CASE("watch registers under the connection's limit and sees later writes", "[operations]") {
  KeySpace keys;
  auto watch = std::make_shared<Recorder>("p/");
  auto full = call([&](wire::Writer& w) { return store_ops::watch(keys, watch, 2, 2, w); });
  CHECK(full.status == Status::kTooManyPending);
  CHECK(full.message() == "too many watches on one connection");
  auto long_prefix = call([&](wire::Writer& w) {
    return store_ops::watch(keys, std::make_shared<Recorder>(kLongKey), 0, 2, w);
  });
  CHECK(long_prefix.status == Status::kKeyTooLong);

  CHECK(call([&](wire::Writer& w) { return store_ops::set(keys, "p/x", "1", w); }).status == Status::kOk);
  CHECK(watch->seen.empty());  // refused: not registered

  CHECK(call([&](wire::Writer& w) { return store_ops::watch(keys, watch, 1, 2, w); }).status == Status::kOk);
  CHECK(call([&](wire::Writer& w) { return store_ops::remove(keys, "p/x", w); }).status == Status::kOk);
  CHECK(watch->seen == std::vector<std::string>{"del p/x"});
}
