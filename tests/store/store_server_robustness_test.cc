// Bad input from raw sockets, every limit, tokens, and a server that goes away.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>
#include <netinet/tcp.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <fstream>
#include <mutex>
#include <thread>

#include "store/store_session.h"
#include "tests/support/loopback_socket.h"
#include "tests/support/store_fixture.h"
#include "tests/support/child_process.h"

using namespace crun;
using namespace crun::test;

namespace {
StoreServerOptions quick_options() {
  StoreServerOptions o;
  o.handshake_timeout = 300ms;
  o.frame_timeout = 300ms;
  return o;
}

// After each abuse, a well-behaved client is still served.
void check_still_serving(ServerFixture& f) {
  auto c = f.client();
  c->set("health", "ok");
  CHECK(c->get("health", 1s) == "ok");
}
}  // namespace

TEST_CASE("garbage and a wrong magic number drop only that connection", "[robustness]") {
  ServerFixture f(quick_options());
  auto bystander = f.client();
  RawSocket garbage(f.server.port());
  garbage.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(garbage.closed_by_peer_within(5s));
  check_still_serving(f);
  bystander->set("still", "here");  // an existing connection was not disturbed
  CHECK(bystander->get("still", 1s) == "here");
  CHECK(f.server.stats().connections_dropped >= 1);
}

TEST_CASE("a frame longer than the limit drops the connection", "[robustness][limits]") {
  ServerFixture f(quick_options());
  RawSocket s(f.server.port());
  REQUIRE(s.handshake());
  std::string header;
  wire::Writer(header).u32(static_cast<std::uint32_t>(kMaxFrameSize + 1));
  s.send(header);
  CHECK(s.closed_by_peer_within(5s));
  check_still_serving(f);
}

TEST_CASE("a frame shorter than its own header drops the connection", "[robustness]") {
  ServerFixture f(quick_options());
  RawSocket s(f.server.port());
  REQUIRE(s.handshake());
  std::string header;
  wire::Writer(header).u32(2);
  s.send(header + "xx");
  CHECK(s.closed_by_peer_within(5s));
  check_still_serving(f);
}

TEST_CASE("a truncated payload inside a frame drops the connection", "[robustness]") {
  ServerFixture f(quick_options());
  RawSocket s(f.server.port());
  REQUIRE(s.handshake());
  // A set whose key claims 1,000 bytes in a 20-byte frame.
  s.send(frame(wire::Op::kSet, 1, [](wire::Writer& w) {
    w.u32(1000);
    w.u32(0);
    w.u32(0);
  }));
  CHECK(s.closed_by_peer_within(5s));
  check_still_serving(f);
}

TEST_CASE("a half-sent frame or handshake is dropped after the read timeout", "[robustness]") {
  ServerFixture f(quick_options());
  RawSocket silent_hello(f.server.port());
  silent_hello.send(std::string("\x43\x52", 2));  // half a magic number, then silence
  RawSocket half_frame(f.server.port());
  REQUIRE(half_frame.handshake());
  auto full = frame(wire::Op::kSet, 1, [](wire::Writer& w) {
    w.str("k");
    w.str("v");
  });
  half_frame.send(full.substr(0, full.size() - 3));
  CHECK(silent_hello.closed_by_peer_within(5s));
  CHECK(half_frame.closed_by_peer_within(5s));
  check_still_serving(f);
}

TEST_CASE("an idle but complete connection is kept", "[robustness]") {
  ServerFixture f(quick_options());
  auto c = f.client();
  RawSocket idle(f.server.port());
  REQUIRE(idle.handshake());
  CHECK_FALSE(idle.closed_by_peer_within(600ms));  // longer than both read timeouts
  c->ping();
}

TEST_CASE("unknown operations and trailing bytes", "[robustness]") {
  ServerFixture f(quick_options());
  RawSocket s(f.server.port());
  REQUIRE(s.handshake());
  s.send(frame(static_cast<wire::Op>(200), 7, [](wire::Writer&) {}));
  std::string reply = s.recv_n(4 + 5);
  REQUIRE(reply.size() == 9);
  wire::Reader r(reply);
  r.u32();
  CHECK(r.u8() == static_cast<std::uint8_t>(wire::Status::kUnknownOp));
  CHECK(r.u32() == 7);
  s.recv_n(64, 200ms);  // the message text
  // A ping with a trailing byte is malformed: dropped.
  s.send(frame(wire::Op::kPing, 8, [](wire::Writer& w) { w.u8(1); }));
  CHECK(s.closed_by_peer_within(5s));
}

// The server reads straight into the room its session offers (store_session.h: before the
// handshake no more than a preamble, then 2 KiB for an idle connection's first read, 64 KiB
// chunks after a full one): frames on either side of those edges, one to a write and many to a
// write, and a hello with requests behind it in the same write, all arrive whole.
TEST_CASE("frames of every length around the first read's size arrive whole, alone and many to a write",
          "[robustness]") {
  ServerFixture f(quick_options());
  std::vector<std::size_t> lengths = {0, 1, 2047, 2048, 2049, 70000};
  for (std::size_t n = 2000; n <= 2040; ++n) lengths.push_back(n);  // frames of 2,0xx bytes: the first read's edge
  auto value_of = [](std::size_t n) {
    std::string v(n, '\0');
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>('a' + (i * 7 + n) % 26);
    return v;
  };
  auto set_frame = [&](const std::string& key, std::size_t n, std::uint32_t id) {
    return frame(wire::Op::kSet, id, [&](wire::Writer& w) {
      w.str(key);
      w.str(value_of(n));
    });
  };
  // Each reply: an empty OK frame carrying the request's id.
  auto check_replies = [](RawSocket& s, std::uint32_t first, std::size_t count) {
    const std::string replies = s.recv_n(count * 9);
    REQUIRE(replies.size() == count * 9);
    wire::Reader r(replies);
    for (std::size_t i = 0; i < count; ++i) {
      CHECK(r.u32() == 5);
      CHECK(r.u8() == static_cast<std::uint8_t>(wire::Status::kOk));
      CHECK(r.u32() == first + i);
    }
  };
  RawSocket alone(f.server.port());
  REQUIRE(alone.handshake());
  std::uint32_t id = 1;
  for (std::size_t n : lengths) {
    alone.send(set_frame("alone/" + std::to_string(n), n, id));
    check_replies(alone, id++, 1);
  }
  RawSocket many(f.server.port());
  std::string all = wire::encode_hello("");  // the hello and every request in one write
  for (std::size_t i = 0; i < lengths.size(); ++i) all += set_frame("many/" + std::to_string(lengths[i]), lengths[i], static_cast<std::uint32_t>(i + 1));
  many.send(all);
  REQUIRE(many.recv_n(8).size() == 8);
  check_replies(many, 1, lengths.size());
  auto c = f.client();
  for (std::size_t n : lengths) {
    CHECK(c->get("alone/" + std::to_string(n), 1s) == value_of(n));
    CHECK(c->get("many/" + std::to_string(n), 1s) == value_of(n));
  }
  // A hello whose 1,000-byte token comes in two writes, requests behind its second part: the
  // server reads the rest of the preamble, then the frames.
  StoreServerOptions with_token = quick_options();
  with_token.token = std::string(1000, 't');
  ServerFixture g(with_token);
  RawSocket long_hello(g.server.port());
  const std::string hello = wire::encode_hello(with_token.token);
  long_hello.send(hello.substr(0, 700));
  REQUIRE(eventually([&] { return g.server.stats().bytes_received >= 700; }));  // a wake of its own
  std::string rest = hello.substr(700);
  for (std::uint32_t i = 0; i < 3; ++i) rest += set_frame("after-token/" + std::to_string(i), 100, i + 1);
  long_hello.send(rest);
  REQUIRE(long_hello.recv_n(8).size() == 8);
  check_replies(long_hello, 1, 3);
}

TEST_CASE("replies larger than the socket takes wait for room while others are served, then arrive whole",
          "[robustness]") {
  ServerFixture f;
  auto setter = f.client();
  std::string big(16u << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  setter->set("big", big);
  // A client asks for the value twice and reads nothing yet: 32 MiB of replies, far more than
  // loopback's socket buffers hold, so the server's write stops part-way and waits for room.
  RawSocket slow(f.server.port());
  REQUIRE(slow.handshake());
  auto get = [](std::uint32_t id) {
    return frame(wire::Op::kGet, id, [](wire::Writer& w) {
      w.str("big");
      w.u32(0);
    });
  };
  slow.send(get(1) + get(2));
  // Meanwhile another connection is served.
  setter->set("small", "s");
  for (int i = 0; i < 200; ++i) REQUIRE(setter->get("small", 1s) == "s");
  // Then both replies arrive, whole and in order.
  for (std::uint32_t id = 1; id <= 2; ++id) {
    const std::string header = slow.recv_n(4, 10s);
    REQUIRE(header.size() == 4);
    const std::uint32_t length = wire::Reader(header).u32();
    const std::string body = slow.recv_n(length, 10s);
    REQUIRE(body.size() == length);
    wire::Reader reply(body);
    CHECK(reply.u8() == 0);  // OK
    CHECK(reply.u32() == id);
    CHECK(reply.str() == big);
    CHECK(reply.done());
  }
  // The connection that waited is served as before.
  slow.send(get(3));
  const std::string header = slow.recv_n(4, 10s);
  REQUIRE(header.size() == 4);
  CHECK(slow.recv_n(wire::Reader(header).u32(), 10s).size() == 1 + 4 + 4 + big.size());  // status, id, value
}

TEST_CASE("clients vanishing mid-request leave nothing parked", "[robustness]") {
  ServerFixture f(quick_options());
  for (int i = 0; i < 20; ++i) {
    RawSocket s(f.server.port());
    REQUIRE(s.handshake());
    s.send(frame(wire::Op::kGet, 1, [&](wire::Writer& w) {
      w.str("never/" + std::to_string(i));
      w.u32(wire::kForever);
    }));
    s.send(frame(wire::Op::kWatch, 2, [](wire::Writer& w) { w.str("never/"); }));
    s.recv_n(9 + 0, 1s);  // the watch's OK
  }  // every socket closes here, with its get still parked
  REQUIRE(eventually([&] { return f.server.stats().open_connections == 0; }));
  auto st = f.server.stats();
  CHECK(st.open_connections == 0);
  CHECK(st.parked_requests == 0);
  auto c = f.client();
  c->set("never/0", "finally");  // wakes nothing, notifies nobody, and does not crash
  CHECK(c->get("never/0", 1s) == "finally");
}

TEST_CASE("each limit is enforced with a named error", "[robustness][limits]") {
  StoreServerOptions o = quick_options();
  o.max_pending_per_connection = 4;
  o.max_connections = 3;
  ServerFixture f(o);
  auto c = f.client();

  SECTION("key length") {
    std::string long_key(kMaxKeyLength + 1, 'k');
    try {
      c->set(long_key, "v");
      FAIL("an over-long key must be rejected");
    } catch (const StoreRejected& e) {
      CHECK(e.code() == static_cast<int>(wire::Status::kKeyTooLong));
      CHECK_THAT(e.what(), Catch::Contains("exceeds 4096"));
    }
    c->set(std::string(kMaxKeyLength, 'k'), "v");  // exactly at the limit is fine
  }
  SECTION("value size, checked by the client and by the server") {
    std::string big(kMaxValueSize + 1, 'v');
    CHECK_THROWS_AS(c->set("big", big), StoreRejected);
    RawSocket s(f.server.port());
    REQUIRE(s.handshake());
    s.send(frame(wire::Op::kSet, 3, [&](wire::Writer& w) {
      w.str("big");
      w.str(big);
    }));
    std::string reply = s.recv_n(9, 10s);
    REQUIRE(reply.size() == 9);
    wire::Reader r(reply);
    r.u32();
    CHECK(r.u8() == static_cast<std::uint8_t>(wire::Status::kValueTooLarge));
    c->append("grow", std::string(kMaxValueSize, 'a'));
    CHECK_THROWS_AS(c->append("grow", "b"), StoreRejected);
  }
  SECTION("parked requests per connection") {
    RawSocket s(f.server.port());
    REQUIRE(s.handshake());
    for (std::uint32_t id = 1; id <= 5; ++id) {
      s.send(frame(wire::Op::kGet, id, [&](wire::Writer& w) {
        w.str("missing" + std::to_string(id));
        w.u32(wire::kForever);
      }));
    }
    std::string reply = s.recv_n(9, 5s);  // only the fifth is answered, with an error
    REQUIRE(reply.size() == 9);
    wire::Reader r(reply);
    r.u32();
    CHECK(r.u8() == static_cast<std::uint8_t>(wire::Status::kTooManyPending));
    CHECK(r.u32() == 5);
  }
  SECTION("keys per request") {
    RawSocket s(f.server.port());
    REQUIRE(s.handshake());
    s.send(frame(wire::Op::kCheck, 1, [&](wire::Writer& w) {
      w.u32(static_cast<std::uint32_t>(kMaxKeysPerRequest + 1));
      for (std::size_t i = 0; i <= kMaxKeysPerRequest; ++i) w.str("");
    }));
    CHECK(s.closed_by_peer_within(5s));
  }
  SECTION("connections") {
    auto c2 = f.client();
    auto c3 = f.client();
    StoreClientOptions quick;
    quick.connect_timeout = 2s;
    try {
      TcpStore c4(f.endpoint(), quick);
      FAIL("a fourth connection must be refused");
    } catch (const StoreRejected& e) {
      CHECK_THAT(e.what(), Catch::Contains("connection limit"));
    }
    c3.reset();
    REQUIRE(eventually([&] { return f.server.stats().open_connections == 2; }));
    TcpStore c5(f.endpoint(), quick);  // room again
    c5.ping();
  }
}

TEST_CASE("a token-protected server admits only holders of the token", "[robustness][token]") {
  StoreServerOptions o = quick_options();
  o.token = "s3cret";
  ServerFixture f(o);
  StoreClientOptions good;
  good.token = "s3cret";
  TcpStore ok(f.endpoint(), good);
  ok.set("k", "v");
  for (std::string wrong : {"", "s3cre", "s3cret!", "other"}) {
    StoreClientOptions bad;
    bad.token = wrong;
    try {
      TcpStore c(f.endpoint(), bad);
      c.get("k", 1s);
      FAIL("token '" << wrong << "' must be rejected");
    } catch (const StoreRejected& e) {
      CHECK_THAT(e.what(), Catch::Contains("wrong or missing token"));
    }
  }
  // A raw client that skips the token cannot read either.
  RawSocket raw(f.server.port());
  raw.send(wire::encode_hello(""));
  std::string reply = raw.recv_n(8);
  REQUIRE(reply.size() == 8);
  raw.send(frame(wire::Op::kGet, 1, [](wire::Writer& w) {
    w.str("k");
    w.u32(0);
  }));
  CHECK(raw.closed_by_peer_within(5s));
}

TEST_CASE("a server that is gone gives a clear client error", "[robustness][gone]") {
  auto f = std::make_unique<ServerFixture>();
  auto endpoint = f->endpoint();
  auto c = f->client();
  c->set("k", "v");
  f.reset();  // the server stops and closes every connection
  try {
    c->get("k", 1s);
    FAIL("a call after the server stopped must fail");
  } catch (const StoreConnectionError& e) {
    CHECK_THAT(e.what(), Catch::Contains(endpoint.str()));
  }
  CHECK_THROWS_AS(c->ping(), StoreConnectionError);  // and keeps failing, never hangs

  StoreClientOptions quick;
  quick.connect_timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore nobody(endpoint, quick);
    FAIL("connecting to a closed port must fail");
  } catch (const StoreConnectionError& e) {
    CHECK_THAT(e.what(), Catch::Contains(endpoint.str()) && Catch::Contains("refused"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("a blocked get is released with an error when the server stops", "[robustness][gone]") {
  auto f = std::make_unique<ServerFixture>();
  auto c = f->client();
  std::string error;
  std::thread t([&] {
    try {
      c->get("never", 60s);
    } catch (const StoreError& e) {
      error = e.what();
    }
  });
  REQUIRE(eventually([&] { return f->server.stats().parked_requests == 1; }));
  f.reset();
  t.join();
  CHECK_THAT(error, Catch::Contains("closed the connection"));
}

// Defect: connection A was closed inside KeySpace::changed (its queue overflowed when its parked
// get completed), and closing released A's ephemeral key, freeing the value the keyspace was
// passing on to another connection's watch (heap use-after-free; silent in a release build,
// where the watcher saw the delete before the set).
TEST_CASE("a client dropped while being notified leaves other watchers a valid value", "[robustness][defect]") {
  StoreServerOptions o = quick_options();
  o.max_outbound_bytes = 1u << 20;
  ServerFixture f(o);
  auto setter = f.client();
  const std::string big(254 * 1024, 'b');  // four replies fill A's queue to just under 1 MiB
  setter->set("big", big);
  EventQueue<StoreEvent> events;
  auto watcher = f.client();
  auto w = watcher->watch("", [&](const StoreEvent& e) {
    if (e.key == "k") events.push(e);
  });
  const std::string value(8 * 1024, 'e');
  RawSocket a(f.server.port());
  REQUIRE(a.handshake());
  auto get = [](std::uint32_t id, const std::string& key, std::uint32_t timeout) {
    return frame(wire::Op::kGet, id, [&](wire::Writer& w) {
      w.str(key);
      w.u32(timeout);
    });
  };
  a.send(get(1, "k", wire::kForever) + get(2, "big", 0) + get(3, "big", 0) + get(4, "big", 0) + get(5, "big", 0) +
         frame(wire::Op::kSetEphemeral, 6, [&](wire::Writer& w) {
           w.str("k");
           w.str(value);
         }));
  auto first = events.pop(5s);
  auto second = events.pop(5s);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->kind == StoreEvent::Kind::kSet);
  CHECK(first->value == value);
  CHECK(second->kind == StoreEvent::Kind::kDelete);
  CHECK(a.closed_by_peer_within(5s));
  check_still_serving(f);
  CHECK_FALSE(setter->try_get("k").has_value());
}

namespace {
std::size_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
}  // namespace

// Defect: a handshake and a frame header declaring a 65 MiB body made the server allocate and zero
// the whole body as soon as one more byte arrived (ten such connections: +680 MB).
TEST_CASE("memory grows with bytes received, not with a declared frame size", "[robustness][limits][defect]") {
  StoreServerOptions o = quick_options();
  o.frame_timeout = 30s;  // the connections stay while we measure
  o.token = GENERATE(std::string(), std::string("s3cret"));
  ServerFixture f(o);
  const std::size_t rss_before = rss_bytes();
  std::string header;
  wire::Writer(header).u32(static_cast<std::uint32_t>(kMaxFrameSize));
  std::vector<std::unique_ptr<RawSocket>> clients;
  std::size_t sent = 0;
  for (int i = 0; i < 10; ++i) {
    clients.push_back(std::make_unique<RawSocket>(f.server.port()));
    // With a token set, a wrong one: the header and body that follow must not be buffered either.
    std::string hello = wire::encode_hello(o.token.empty() ? "" : "wrong");
    if (o.token.empty()) REQUIRE(clients.back()->handshake());
    std::string bytes = (o.token.empty() ? std::string() : hello) + header + std::string(1000, 'x');
    clients.back()->send(bytes);
    sent += bytes.size() + (o.token.empty() ? hello.size() : 0);
  }
  if (o.token.empty()) {
    // Once the server has seen the headers, one more byte each (the old code allocated the whole
    // declared body at this point).
    REQUIRE(eventually([&] { return f.server.stats().bytes_received >= sent; }));
    for (auto& c : clients) c->send("y");
    REQUIRE(eventually([&] { return f.server.stats().bytes_received >= sent + clients.size(); }));
    CHECK(f.server.stats().input_buffer_bytes <= 10 * 2 * StoreSession::kReadChunk);
  } else {
    for (auto& c : clients) CHECK(c->closed_by_peer_within(5s));
  }
  CHECK(rss_bytes() < rss_before + (64u << 20));
  StoreClientOptions holder;
  holder.token = o.token;
  auto c = f.client(holder);
  c->set("health", "ok");
  CHECK(c->get("health", 1s) == "ok");
}

// A client's side of the same rule: its reply buffer was 64 KiB, zero-filled, from the first
// reply on (16 page faults per connection; an agent has three).
TEST_CASE("a client's reply buffer grows with the replies it receives", "[robustness][limits]") {
  ServerFixture f;
  auto c = f.client();
  c->set("small", "v");
  CHECK(c->get("small", 1s) == "v");
  CHECK(c->receive_buffer_bytes() <= 8192);
  const std::string big(1 << 20, 'b');
  c->set("big", big);
  CHECK(c->get("big", 1s) == big);
  CHECK(c->receive_buffer_bytes() >= big.size());
  CHECK(c->receive_buffer_bytes() <= 2 * big.size() + 8192);
}

// ... and not with what a reply declares: a peer that announces a 64 MiB frame and sends 1 KiB
// of it made the client allocate the whole frame at once.
TEST_CASE("a reply that declares more than it sends grows a client's buffer only by what arrives",
          "[robustness][limits]") {
  LoopbackSocket listener(LoopbackSocket::Mode::kListening);
  // The peer: answers the handshake, then the first request with a frame far longer than it sends.
  std::thread peer([listening = listener.fd] {
    const int fd = ::accept4(listening, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    char in[4096];
    (void)!::read(fd, in, wire::kPreambleSize);
    (void)!::write(fd, "CRST\1\0\0\0", wire::kPreambleSize);  // magic, version 1, status ok
    (void)!::read(fd, in, sizeof in);                           // the request
    std::string reply;
    wire::Writer(reply).u32(static_cast<std::uint32_t>(kMaxFrameSize - 16));
    reply += std::string(1024, 'x');
    (void)!::write(fd, reply.data(), reply.size());
    while (::read(fd, in, sizeof in) > 0) {  // until the client goes
    }
    ::close(fd);
  });
  {
    StoreClientOptions o;
    o.timeout = 500ms;
    TcpStore c(StoreEndpoint{"127.0.0.1", listener.port}, o);
    CHECK_THROWS_AS(c.try_get("k"), StoreTimeout);  // the rest of the frame never comes
    CHECK(c.receive_buffer_bytes() <= 16 * 1024);
  }
  peer.join();
}

// Defect: the store's listening and accepted sockets were inherited by every program the process
// exec'd (the agent's workers), which kept the rendezvous port and connections open.
TEST_CASE("a program exec'd while the store serves inherits none of its sockets", "[robustness][cloexec][defect]") {
  ServerFixture f(quick_options());
  auto c = f.client();
  c->set("k", "v");
  RawSocket raw(f.server.port());
  REQUIRE(raw.handshake());
  REQUIRE(eventually([&] { return f.server.stats().open_connections == 2; }));
  ChildProcess ls({"/bin/sh", "-c", "for f in /proc/$$/fd/*; do echo \"$f -> $(readlink $f)\"; done"});
  REQUIRE(ls.wait_exit(10s) == 0);
  INFO(ls.out());
  CHECK(ls.out().find("socket:") == std::string::npos);
}

// torch 1.13 opens a second, silent connection per TCPStore: closing it at the handshake timeout
// is routine (no "dropped" line); a connection that sent part of a preamble is a fault.
TEST_CASE("a silent connection closes quietly at the handshake timeout; a half preamble is dropped",
          "[robustness]") {
  ServerFixture f(quick_options());
  RawSocket silent(f.server.port());
  CHECK(silent.closed_by_peer_within(5s));
  CHECK(f.server.stats().connections_dropped == 0);
  RawSocket half(f.server.port());
  half.send("CRS");
  CHECK(half.closed_by_peer_within(5s));
  CHECK(eventually([&] { return f.server.stats().connections_dropped == 1; }));
  check_still_serving(f);
}

namespace {
// This process's socket connected from 127.0.0.1:`peer_port` (the server's end of a client's
// connection: the server runs in this process); -1 when there is none.
int accepted_from(std::uint16_t peer_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    if (e->d_name[0] == '.' || fd == ::dirfd(dir) ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET)
      continue;
    if (ntohs(peer.sin_port) == peer_port) found = fd;
  }
  ::closedir(dir);
  return found;
}

int int_option(int fd, int level, int name) {
  int value = -1;
  socklen_t len = sizeof value;
  return ::getsockopt(fd, level, name, &value, &len) == 0 ? value : -1;
}
}  // namespace

// The options are set on the listener and inherited by what it accepts; the peer's name comes
// from accept itself: a regression here is a connection with Nagle's delay, one whose vanished
// peer is never noticed, or log lines that say "unknown peer".
TEST_CASE("every accepted connection has no Nagle delay and keepalive probes; its lines name its peer", "[robustness]") {
  std::mutex mu;
  std::vector<std::string> lines;
  StoreServerOptions o = quick_options();
  o.log = [&](const std::string& line) {
    std::lock_guard lock(mu);
    lines.push_back(line);
  };
  ServerFixture f(o);
  for (int i = 0; i < 2; ++i) {  // the first connection, and one after the server learnt what is inherited
    RawSocket raw(f.server.port());
    REQUIRE(raw.handshake());
    const int fd = accepted_from(raw.local_port());
    REQUIRE(fd >= 0);
    CHECK(int_option(fd, IPPROTO_TCP, TCP_NODELAY) == 1);
    CHECK(int_option(fd, SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE) == 30);
    CHECK(int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL) == 5);
    CHECK(int_option(fd, IPPROTO_TCP, TCP_KEEPCNT) == 3);
  }
  RawSocket garbage(f.server.port());
  const std::string peer = "127.0.0.1:" + std::to_string(garbage.local_port());
  garbage.send("GET / HTTP/1.1\r\n\r\n");
  CHECK(garbage.closed_by_peer_within(5s));
  CHECK(eventually([&] {
    std::lock_guard lock(mu);
    for (const auto& line : lines) {
      const std::string named = "dropped connection from " + peer;
      const auto at = line.find(named);
      if (at != std::string::npos && !std::isdigit(static_cast<unsigned char>(line[at + named.size()]))) return true;
    }
    return false;
  }));
}
