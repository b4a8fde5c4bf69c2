// StoreSession and KeySpace driven with bytes and a hand-set clock: no sockets, no threads.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_session.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using crun::test::frame;
using namespace std::chrono_literals;
using Clock = StoreSession::Clock;

namespace {

struct Reply {
  wire::Status status;
  std::uint32_t id;
  std::string payload;
};

// One session with a byte pipe in each direction.
class Client {
 public:
  Client(KeySpace& keys, const SessionLimits& limits, std::uint64_t serial)
      : session(std::make_unique<StoreSession>(keys, limits, serial, [this] { ++output_ready; })) {}

  void send(std::string_view bytes, Clock::time_point now = Clock::time_point{}) {
    while (!bytes.empty()) {
      auto space = session->input_space();
      REQUIRE(!space.empty());
      std::size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      session->received(n, now);
      bytes.remove_prefix(n);
      if (session->ended()) return;
    }
  }
  bool hello(const std::string& token = "") {
    send(wire::encode_hello(token));
    take();
    if (in.size() < 8) return false;
    wire::Reader r(std::string_view(in).substr(0, 8));
    bool ok = r.u32() == wire::kMagic && (r.u16(), r.u16() == 0);
    in.erase(0, 8);
    return ok;
  }
  void take() {
    ReplyQueue out;
    session->take_output(out);
    out.copy_to(in);
  }
  // Every complete reply received so far.
  std::vector<Reply> replies() {
    take();
    std::vector<Reply> all;
    std::size_t pos = 0;
    while (in.size() - pos >= 4) {
      std::uint32_t len;
      std::memcpy(&len, in.data() + pos, 4);
      if (in.size() - pos - 4 < len) break;
      wire::Reader r(std::string_view(in).substr(pos + 4, len));
      Reply rep;
      rep.status = static_cast<wire::Status>(r.u8());
      rep.id = r.u32();
      rep.payload = std::string(std::string_view(in).substr(pos + 9, len - 5));
      all.push_back(rep);
      pos += 4 + len;
    }
    in.erase(0, pos);
    return all;
  }

  std::unique_ptr<StoreSession> session;
  std::string in;
  int output_ready = 0;
};

std::string get(std::uint32_t id, const std::string& key, std::uint32_t timeout_ms) {
  return frame(wire::Op::kGet, id, [&](wire::Writer& w) {
    w.str(key);
    w.u32(timeout_ms);
  });
}
std::string set(std::uint32_t id, const std::string& key, const std::string& value, bool ephemeral = false) {
  return frame(ephemeral ? wire::Op::kSetEphemeral : wire::Op::kSet, id, [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  });
}
std::string watch(std::uint32_t id, const std::string& prefix) {
  return frame(wire::Op::kWatch, id, [&](wire::Writer& w) { w.str(prefix); });
}

struct Notification {
  std::uint8_t kind;
  std::string key;
  std::string value;
};
Notification parse_notification(const Reply& r) {
  wire::Reader rd(r.payload);
  Notification n;
  n.kind = rd.u8();
  n.key = std::string(rd.str());
  n.value = std::string(rd.str());
  return n;
}

}  // namespace

TEST_CASE("a session answers requests decoded from bytes, split anywhere", "[session]") {
  KeySpace keys;
  SessionLimits limits;
  Client c(keys, limits, 1);
  REQUIRE(c.hello());
  std::string bytes = set(1, "k", "v") + get(2, "k", 0);
  for (char b : bytes) c.send(std::string_view(&b, 1));  // one byte at a time
  auto r = c.replies();
  REQUIRE(r.size() == 2);
  CHECK(r[0].status == wire::Status::kOk);
  CHECK(r[1].id == 2);
  CHECK(wire::Reader(r[1].payload).str() == "v");
  CHECK(c.session->buffered() == 0);
}

TEST_CASE("a session's memory follows bytes received, not what a header declares", "[session][limits]") {
  KeySpace keys;
  SessionLimits limits;
  limits.token = "secret";
  SECTION("before the handshake, at most the preamble and a token are read") {
    Client c(keys, limits, 1);
    std::string preamble;
    wire::Writer w(preamble);
    w.u32(wire::kMagic);
    w.u16(wire::kVersion);
    w.u16(static_cast<std::uint16_t>(wire::kMaxTokenLength));
    c.send(preamble);
    std::size_t offered = 0;
    while (!c.session->ended()) {
      auto space = c.session->input_space();
      offered += space.size();
      REQUIRE(offered <= wire::kPreambleSize + wire::kMaxTokenLength);
      std::memset(space.data(), 'x', space.size());
      c.session->received(space.size(), {});
    }
    CHECK(c.session->end_reason() == "rejected: wrong or missing token");
    CHECK(c.session->flush_before_close());
    CHECK(c.session->buffer_capacity() <= 4096);
  }
  SECTION("a frame header declaring 65 MiB, then one byte, costs one read chunk") {
    Client c(keys, limits, 1);
    REQUIRE(c.hello("secret"));
    std::string header;
    wire::Writer(header).u32(static_cast<std::uint32_t>(kMaxFrameSize));
    c.send(header + "x");
    CHECK_FALSE(c.session->ended());
    CHECK(c.session->buffered() == 5);
    CHECK(c.session->buffer_capacity() <= 2 * StoreSession::kReadChunk);
  }
  SECTION("the room a big frame needed is given back although a partial frame follows it") {
    // Found by the store_session fuzz target (long run): the buffer shrank only when nothing was
    // buffered, so a 4 MiB frame followed by 5 bytes of the next kept 4 MiB for those 5 bytes.
    Client c(keys, limits, 1);
    REQUIRE(c.hello("secret"));
    const std::string big = set(1, "k", std::string(4u << 20, 'v'));
    std::string header;
    wire::Writer(header).u32(100);
    c.send(big + header + "x");
    REQUIRE_FALSE(c.session->ended());
    CHECK(c.replies().size() == 1);
    CHECK(c.session->buffered() == 5);
    CHECK(c.session->buffer_capacity() <= 4 * (c.session->buffered() + StoreSession::kReadChunk));
  }
}

// Defect: a connection closed while the keyspace was notifying on its behalf freed the value that
// was being passed to other watchers (heap use-after-free, reachable by any client).
TEST_CASE("a session that overflows while being notified leaves other watchers a valid value", "[session][defect]") {
  KeySpace keys;
  SessionLimits limits;
  limits.max_outbound_bytes = 1u << 20;
  Client setter(keys, limits, 1), watcher(keys, limits, 2), a(keys, limits, 3);
  REQUIRE(setter.hello());
  REQUIRE(watcher.hello());
  REQUIRE(a.hello());
  const std::string big(254 * 1024, 'b');
  setter.send(set(1, "big", big));
  watcher.send(watch(9, ""));
  REQUIRE(watcher.replies().size() == 1);
  const std::string value(8 * 1024, 'e');
  // One batch: a get that parks, four replies that fill the queue to just under the limit, then
  // an ephemeral set of the parked key: its completion tips the queue over the limit.
  a.send(get(1, "k", wire::kForever) + get(2, "big", 0) + get(3, "big", 0) + get(4, "big", 0) + get(5, "big", 0) +
         set(6, "k", value, /*ephemeral=*/true));
  REQUIRE(a.session->ended());
  CHECK_THAT(a.session->end_reason(), Catch::Contains("not reading its replies"));
  a.session->detach();  // what the server does when it closes the connection
  auto seen = watcher.replies();
  std::vector<Notification> about_k;
  for (auto& r : seen)
    if (r.status == wire::Status::kNotify && parse_notification(r).key == "k") about_k.push_back(parse_notification(r));
  REQUIRE(about_k.size() == 2);
  CHECK(about_k[0].kind == 1);
  CHECK(about_k[0].value == value);
  CHECK(about_k[1].kind == 2);
  CHECK(keys.find("k") == nullptr);
}

TEST_CASE("releases requested from inside a notification wait until it ends", "[session][keyspace]") {
  KeySpace keys;
  struct Closer : Watch {
    KeySpace* ks = nullptr;
    std::vector<std::string> seen;
    void changed(std::uint8_t kind, const std::string& key, const std::string* value) override {
      seen.push_back(std::to_string(kind) + key + (value ? "=" + *value : ""));
      if (key == "mine" && kind == 1) ks->release(7, {"mine"});  // a connection closing mid-notification
    }
  };
  auto w = std::make_shared<Closer>();
  w->prefix = "";
  w->ks = &keys;
  keys.add_watch(w);
  keys.set_owned("mine", "v", 7);
  CHECK(w->seen == std::vector<std::string>{"1mine=v", "2mine"});
  CHECK(keys.find("mine") == nullptr);
  struct Writer : Watch {
    KeySpace* ks = nullptr;
    void changed(std::uint8_t, const std::string&, const std::string*) override { ks->set("x", "y"); }
  };
  auto bad = std::make_shared<Writer>();
  bad->prefix = "trigger";
  bad->ks = &keys;
  keys.add_watch(bad);
  CHECK_THROWS_AS(keys.set("trigger", "1"), std::logic_error);
  keys.remove_watch(bad);
  keys.set("after", "fine");  // the keyspace is usable again
  CHECK(*keys.find("after") == "fine");
}

TEST_CASE("a session's own notification follows its reply", "[session][watch]") {
  KeySpace keys;
  SessionLimits limits;
  Client c(keys, limits, 1);
  REQUIRE(c.hello());
  c.send(watch(1, "p/") + set(2, "p/a", "1"));
  auto r = c.replies();
  REQUIRE(r.size() == 3);
  CHECK(r[0].id == 1);
  CHECK(r[1].id == 2);
  CHECK(r[1].status == wire::Status::kOk);
  CHECK(r[2].status == wire::Status::kNotify);
  CHECK(c.output_ready == 0);  // nothing was queued from outside
}

TEST_CASE("parked requests time out at their deadline, the earliest first", "[session][timeout]") {
  KeySpace keys;
  SessionLimits limits;
  Client c(keys, limits, 1), other(keys, limits, 2);
  REQUIRE(c.hello());
  REQUIRE(other.hello());
  const Clock::time_point t0 = Clock::now();
  c.send(get(1, "slow", 500) + get(2, "fast", 100) + get(3, "never", wire::kForever), t0);
  CHECK(c.session->parked() == 3);
  REQUIRE(c.session->next_deadline() == t0 + 100ms);
  c.session->expire(t0 + 99ms);
  CHECK(c.replies().empty());
  c.session->expire(t0 + 100ms);
  auto r = c.replies();
  REQUIRE(r.size() == 1);
  CHECK(r[0].id == 2);
  CHECK(r[0].status == wire::Status::kTimeout);
  CHECK_THAT(std::string(wire::Reader(r[0].payload).str()), Catch::Contains("fast") && Catch::Contains("100 ms"));
  other.send(set(1, "slow", "now"));  // completes the first get from another connection
  CHECK(c.output_ready == 1);
  r = c.replies();
  REQUIRE(r.size() == 1);
  CHECK(r[0].id == 1);
  CHECK(c.session->next_deadline() == std::nullopt);
  c.session.reset();  // detaches the forever-parked get
  CHECK(keys.parked_keys() == 0);
}
