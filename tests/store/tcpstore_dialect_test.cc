// torch's TCPStore protocol on crun's store, driven with bytes through StoreSession: the
// requests as torch 1.13's client sends them (captured from it: ADD "init/", SET, WAIT then GET)
// and as torch >= 2.2's does (VALIDATE and its magic first, codes shifted by one), both beside a
// crun client on the same KeySpace, fragmented, and malformed.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_session.h"
#include "tests/support/store_fixture.h"

using namespace crun;

namespace {

// Request encoders: torch's fields are host-order u64 lengths and counts, i64 values.
std::string u64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string s(std::string_view b) { return u64(b.size()) + std::string(b); }
std::string code(int c) { return std::string(1, static_cast<char>(c)); }
const std::string kValidate = std::string("\x00\xCE\xF7\x85\x3C", 5);

// torch 1.x codes (SET=0 ... DELETE_KEY=8); torch >= 2.2 adds one (VALIDATE=0) and goes on.
struct Codes {
  int set, compare_set, get, add, check, wait, num_keys, del;
};
constexpr Codes kTorch1{0, 1, 2, 3, 4, 5, 6, 8};
constexpr Codes kTorch2{1, 2, 3, 4, 5, 6, 7, 8};

class TorchClient {
 public:
  TorchClient(KeySpace& keys, SessionLimits limits = {})
      : limits_(std::move(limits)), session(keys, limits_, ++serial_, [this] { ++outside; }) {}
  void send(std::string_view bytes, std::size_t chunk = 1 << 20) {
    while (!bytes.empty() && !session.ended()) {
      auto space = session.input_space();
      std::size_t n = std::min({space.size(), bytes.size(), chunk});
      std::memcpy(space.data(), bytes.data(), n);
      session.received(n, StoreSession::Clock::time_point{});
      bytes.remove_prefix(n);
    }
  }
  std::string take() {
    ReplyQueue queued;
    session.take_output(queued);
    std::string out;
    queued.copy_to(out);
    return out;
  }
  SessionLimits limits_;
  StoreSession session;
  int outside = 0;

 private:
  static inline std::uint64_t serial_ = 0;
};

std::int64_t i64_of(std::string_view b) {
  REQUIRE(b.size() == 8);
  std::int64_t v;
  std::memcpy(&v, b.data(), 8);
  return v;
}

void every_operation(const Codes& c, const std::string& opening) {
  KeySpace keys;
  TorchClient t(keys);
  // torch's client: ADD("init/", 1) from waitForWorkers, keys under its "/" root.
  t.send(opening + code(c.add) + s("init/") + u64(1));
  CHECK(t.session.protocol() == (opening.empty() ? "torch 1.x" : "torch 2.x"));
  CHECK(i64_of(t.take()) == 1);
  t.send(code(c.set) + s("/k") + s("v"));
  CHECK(t.take().empty());  // SET has no reply
  CHECK(*keys.find("/k") == "v");
  // get = WAIT then GET
  t.send(code(c.wait) + u64(1) + s("/k") + code(c.get) + s("/k"));
  CHECK(t.take() == std::string(1, '\0') + s("v"));
  t.send(code(c.add) + s("/n") + u64(static_cast<std::uint64_t>(-3)));
  CHECK(i64_of(t.take()) == -3);
  CHECK(*keys.find("/n") == "-3");
  // compare_set: missing key with "" creates; match swaps; mismatch answers the current value;
  // a missing key with a non-empty expected value answers that value (torch's answer).
  t.send(code(c.compare_set) + s("/cs") + s("") + s("a"));
  CHECK(t.take() == s("a"));
  t.send(code(c.compare_set) + s("/cs") + s("a") + s("b"));
  CHECK(t.take() == s("b"));
  t.send(code(c.compare_set) + s("/cs") + s("zz") + s("c"));
  CHECK(t.take() == s("b"));
  t.send(code(c.compare_set) + s("/none") + s("e") + s("d"));
  CHECK(t.take() == s("e"));
  CHECK(keys.find("/none") == nullptr);
  t.send(code(c.check) + u64(2) + s("/k") + s("/cs"));
  CHECK(t.take() == std::string(1, '\0'));  // READY
  t.send(code(c.check) + u64(2) + s("/k") + s("/missing"));
  CHECK(t.take() == std::string(1, '\1'));  // NOT_READY
  t.send(code(c.num_keys));
  CHECK(i64_of(t.take()) == static_cast<std::int64_t>(keys.size()));
  t.send(code(c.del) + s("/k"));
  CHECK(i64_of(t.take()) == 1);
  t.send(code(c.del) + s("/k"));
  CHECK(i64_of(t.take()) == 0);
  t.send(code(c.get) + s("/k"));  // a missing key (deleted after a WAIT): an empty value
  CHECK(t.take() == s(""));
  CHECK(!t.session.ended());
}

}  // namespace

TEST_CASE("torch 1.x and 2.x clients: every operation, as torch's server answers", "[tcpstore]") {
  SECTION("torch 1.13 numbering, no opening") { every_operation(kTorch1, ""); }
  SECTION("torch >= 2.2 numbering after VALIDATE") { every_operation(kTorch2, kValidate); }
}

TEST_CASE("torch 2.x only: ping, append, multi_get/multi_set, list, cancel_wait", "[tcpstore]") {
  KeySpace keys;
  TorchClient t(keys);
  t.send(kValidate + code(13) + std::string("\x2A\x00\x00\x07", 4));  // PING echoes its nonce
  CHECK(t.take() == std::string("\x2A\x00\x00\x07", 4));
  t.send(code(9) + s("/a") + s("xy") + code(9) + s("/a") + s("z"));  // APPEND, no reply
  CHECK(*keys.find("/a") == "xyz");
  t.send(code(11) + u64(2) + s("/m1") + s("1") + s("/m2") + s("2"));  // MULTI_SET
  t.send(code(10) + u64(3) + s("/m2") + s("/none") + s("/m1"));      // MULTI_GET
  CHECK(t.take() == s("2") + s("") + s("1"));
  t.send(code(17));  // LIST: every key
  CHECK(t.take() == u64(3) + s("/a") + s("/m1") + s("/m2"));
  // A wait that times out on the client: CANCEL_WAIT unparks it and answers WAIT_CANCELED.
  t.send(code(6) + u64(1) + s("/later"));
  CHECK(t.take().empty());
  CHECK(t.session.parked() == 1);
  t.send(code(12));
  CHECK(t.take() == std::string(1, '\1'));
  CHECK(t.session.parked() == 0);
  keys.set("/later", "x");  // nothing parked any more: no late answer
  CHECK(t.take().empty());
}

TEST_CASE("a parked wait answers when another connection sets the key", "[tcpstore]") {
  KeySpace keys;
  TorchClient waiter(keys), setter(keys);
  waiter.send(code(kTorch1.wait) + u64(2) + s("/x") + s("/y"));
  setter.send(code(kTorch1.set) + s("/x") + s("1"));
  CHECK(waiter.take().empty());
  CHECK(waiter.outside == 0);
  setter.send(code(kTorch1.add) + s("/y") + u64(1));
  CHECK(waiter.take() == std::string(1, '\0'));  // STOP_WAITING
  CHECK(waiter.outside == 1);
  CHECK(waiter.session.parked() == 0);
  // A wait the connection's own request completes is answered after that request's reply.
  waiter.send(code(kTorch1.wait) + u64(1) + s("/z"));
  waiter.send(code(kTorch1.add) + s("/z") + u64(4));
  CHECK(waiter.take() == u64(4) + std::string(1, '\0'));
  CHECK(waiter.outside == 1);
}

TEST_CASE("a crun client and torch clients share one KeySpace", "[tcpstore]") {
  KeySpace keys;
  TorchClient torch1(keys), torch2(keys);
  torch1.send(code(kTorch1.set) + s("//worker/attempt_0/k") + s("from torch"));
  TorchClient crun_client(keys);  // a byte pipe like the others, speaking crun's protocol
  crun_client.send(wire::encode_hello("") + crun::test::frame(wire::Op::kTryGet, 7, [](wire::Writer& w) {
                     w.str("//worker/attempt_0/k");
                   }) + crun::test::frame(wire::Op::kSet, 8, [](wire::Writer& w) {
                     w.str("//worker/attempt_0/c");
                     w.str("41");
                   }));
  CHECK(crun_client.session.protocol() == "crun");
  std::string got = crun_client.take();
  REQUIRE(got.size() > 8 + 9);
  CHECK(got.substr(8 + 9, 15) == std::string("\x01\x0a\x00\x00\x00", 5) + "from torch");  // found, value
  torch2.send(kValidate + code(kTorch2.add) + s("//worker/attempt_0/c") + u64(1));
  CHECK(i64_of(torch2.take()) == 42);
}

TEST_CASE("requests cut anywhere: byte by byte is the same as whole", "[tcpstore]") {
  for (const std::string& opening : {std::string(), kValidate}) {
    const Codes& c = opening.empty() ? kTorch1 : kTorch2;
    KeySpace keys;
    TorchClient t(keys);
    std::string all = opening + code(c.add) + s("init/") + u64(1) + code(c.set) + s("/k") + s(std::string(300, 'v')) +
                      code(c.wait) + u64(1) + s("/k") + code(c.get) + s("/k");
    t.send(all, 1);
    CHECK(t.take() == u64(1) + std::string(1, '\0') + s(std::string(300, 'v')));
    CHECK(t.session.buffered() == 0);
    CHECK(!t.session.ended());
  }
}

TEST_CASE("bad TCPStore traffic ends the session with one line; the KeySpace is untouched", "[tcpstore]") {
  KeySpace keys;
  struct Case {
    const char* what;
    std::string bytes;
    const char* reason;
  };
  const Case cases[] = {
      {"unknown 1.x code", code(9), "unknown torch 1.x TCPStore query code"},
      {"unknown 2.x code", kValidate + code(18), "unknown torch 2.x TCPStore query code"},
      {"1.x watch_key", code(7) + s("/k"), "watch_key is not supported"},
      {"2.x queue", kValidate + code(14) + s("q") + s("v"), "queues are not supported"},
      {"second VALIDATE", kValidate + kValidate, "VALIDATE after the first request"},
      {"key over the limit", code(0) + s(std::string(kMaxKeyLength + 1, 'k')) + s("v"), "key of 4097 bytes exceeds 4096"},
      {"a request over crun's frame bound", code(0) + s("/k") + u64(kMaxFrameSize), "the limit of one request"},
      {"a 2^63 key count", code(5) + u64(1ull << 63), "keys in one request"},
      {"add on text", code(0) + s("/t") + s("text") + code(3) + s("/t") + u64(1), "not a decimal integer"},
      {"neither protocol", "GET / HTTP/1.1\r\n\r\n", "neither a crun store client nor a torch TCPStore client"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    TorchClient t(keys);
    t.send(c.bytes);
    REQUIRE(t.session.ended());
    CHECK_THAT(t.session.end_reason(), Catch::Contains(c.reason));
    CHECK(t.session.fault());
    CHECK(t.session.buffered() == 0);
  }
  CHECK(keys.size() == 1);  // only the "add on text" case's SET went through
}

TEST_CASE("a huge declared value is refused before its bytes arrive; memory follows bytes received",
          "[tcpstore]") {
  KeySpace keys;
  TorchClient t(keys);
  t.send(code(0) + s("/k") + u64(kMaxValueSize));  // allowed size, bytes still to come
  t.send(std::string(1000, 'x'));
  CHECK(!t.session.ended());
  CHECK(t.session.buffer_capacity() < 4 * (t.session.buffered() + StoreSession::kReadChunk) + 1);
}

namespace {
// What crun's protocol answers to one request on a fresh connection: its status and message.
std::pair<wire::Status, std::string> crun_answer(KeySpace& keys, const std::string& request) {
  TorchClient c(keys);  // a byte pipe; crun's hello picks crun's protocol
  c.send(wire::encode_hello("") + request);
  const std::string out = c.take();
  REQUIRE(out.size() > 8 + 9);  // the hello's answer, a reply's length, status and id
  wire::Reader r(std::string_view(out).substr(8 + 4));
  const auto status = static_cast<wire::Status>(r.u8());
  r.u32();
  return {status, std::string(r.str())};
}
}  // namespace

TEST_CASE("a limit violated through torch's protocol is refused as through crun's, with the same message", "[tcpstore]") {
  KeySpace keys;
  keys.set("/text", "abc");
  const std::string long_key(kMaxKeyLength + 1, 'k');
  const std::string big(kMaxValueSize + 1, 'v');
  using test::frame;
  struct Case {
    const char* what;
    std::string crun;
    std::string torch;
    wire::Status status;
  };
  const Case cases[] = {
      {"set: a key over kMaxKeyLength",
       frame(wire::Op::kSet, 1, [&](wire::Writer& w) { w.str(long_key); w.str("v"); }),
       code(kTorch1.set) + s(long_key) + s("v"), wire::Status::kKeyTooLong},
      {"set: a value over kMaxValueSize",
       frame(wire::Op::kSet, 1, [&](wire::Writer& w) { w.str("/k"); w.str(big); }),
       kValidate + code(kTorch2.set) + s("/k") + s(big), wire::Status::kValueTooLarge},
      {"wait: a key over kMaxKeyLength",
       frame(wire::Op::kWait, 1, [&](wire::Writer& w) { w.u32(0); w.u32(1); w.str(long_key); }),
       code(kTorch1.wait) + u64(1) + s(long_key), wire::Status::kKeyTooLong},
      {"add: a key over kMaxKeyLength",
       frame(wire::Op::kAdd, 1, [&](wire::Writer& w) { w.str(long_key); w.i64(1); }),
       code(kTorch1.add) + s(long_key) + u64(1), wire::Status::kKeyTooLong},
      {"add: a value that is not an integer",
       frame(wire::Op::kAdd, 1, [&](wire::Writer& w) { w.str("/text"); w.i64(1); }),
       code(kTorch1.add) + s("/text") + u64(1), wire::Status::kNotInteger},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto [status, message] = crun_answer(keys, c.crun);
    CHECK(status == c.status);
    REQUIRE(!message.empty());
    TorchClient t(keys);
    t.send(c.torch);
    REQUIRE(t.session.ended());
    CHECK_THAT(t.session.end_reason(), Catch::Contains(message));
    CHECK(t.session.fault());
  }
  CHECK(keys.size() == 1);  // nothing was stored
}

TEST_CASE("torch's LIST answers at most the keys one crun list_keys does", "[tcpstore]") {
  KeySpace keys;
  for (std::size_t i = 0; i <= kMaxKeysPerRequest; ++i) keys.set("/k" + std::to_string(i), "");
  TorchClient t(keys);
  t.send(kValidate + code(17));
  const std::string listed = t.take();
  REQUIRE(listed.size() >= 8);
  CHECK(i64_of(listed.substr(0, 8)) == static_cast<std::int64_t>(kMaxKeysPerRequest));
  TorchClient c(keys);
  c.send(wire::encode_hello("") + test::frame(wire::Op::kListKeys, 1, [](wire::Writer& w) { w.str(""); w.u32(~0u); }));
  const std::string out = c.take();
  REQUIRE(out.size() >= 8 + 13);
  wire::Reader r(std::string_view(out).substr(8 + 9));
  CHECK(r.u32() == kMaxKeysPerRequest);
}

TEST_CASE("waits parked per connection are bounded", "[tcpstore]") {
  KeySpace keys;
  SessionLimits limits;
  limits.max_pending = 3;
  TorchClient t(keys, limits);
  for (int i = 0; i < 3; ++i) t.send(code(5) + u64(1) + s("/never" + std::to_string(i)));
  CHECK(t.session.parked() == 3);
  t.send(code(5) + u64(1) + s("/never3"));
  REQUIRE(t.session.ended());
  CHECK_THAT(t.session.end_reason(), Catch::Contains("more than 3 torch TCPStore waits"));
  t.session.detach();
  CHECK(keys.parked_keys() == 0);
}

TEST_CASE("a store with a token refuses TCPStore clients", "[tcpstore]") {
  KeySpace keys;
  SessionLimits limits;
  limits.token = "secret";
  TorchClient t(keys, limits);
  t.send(code(3) + s("init/") + u64(1));
  REQUIRE(t.session.ended());
  CHECK_THAT(t.session.end_reason(), Catch::Contains("requires a token"));
  CHECK(keys.size() == 0);
}
