// The store's bound on replies queued for clients that do not read them, as a separate process
// (`crun store-server --max-queued-reply-bytes 64MiB`), in crun's protocol and in torch's
// TCPStore protocol: raw sockets send gets and never read. Replies of one large value share its
// bytes (the server's peak memory does not grow with their number), and past the bound the
// connection with the most bytes queued is dropped with one line while the others are served.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "store/store_client.h"
#include "store/store_protocol.h"
#include "tests/support/child_process.h"

using namespace crun;
using namespace crun::test;

namespace {

// ASan keeps freed memory in its quarantine (256 MiB by default) before reusing it: the server's
// peak grows by that much more in a sanitized build.
#ifdef CRUN_SANITIZED_BUILD
constexpr std::size_t kSanitizerSlack = std::size_t{288} << 20;
#else
constexpr std::size_t kSanitizerSlack = 0;
#endif

constexpr std::size_t kBound = 64u << 20;

// The peak resident memory of a process (VmHWM), in bytes; -1 when it is gone.
long long peak_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// How one protocol asks for and answers a value, and marks a connection's requests as all taken
// (a set the test's client waits for: the requests before it were handled).
struct Dialect {
  const char* name;
  std::string (*hello)();
  std::string (*get)(std::uint32_t id, const std::string& key);
  std::string (*set)(std::uint32_t id, const std::string& key, const std::string& value);
  // The bytes a connection that sent hello(), gets of `value` 1..n and set(n + 1, ...) receives.
  std::string (*replies)(std::size_t n, const std::string& value);
};

std::string crun_frame(std::uint8_t code, std::uint32_t id, const std::function<void(wire::Writer&)>& fill) {
  std::string out;
  wire::Writer w(out);
  const std::size_t at = w.begin_frame(code, id);
  fill(w);
  w.finish_frame(at);
  return out;
}

const Dialect kCrun{
    "crun",
    [] { return wire::encode_hello(""); },
    [](std::uint32_t id, const std::string& key) {
      return crun_frame(static_cast<std::uint8_t>(wire::Op::kGet), id, [&](wire::Writer& w) {
        w.str(key);
        w.u32(0);
      });
    },
    [](std::uint32_t id, const std::string& key, const std::string& value) {
      return crun_frame(static_cast<std::uint8_t>(wire::Op::kSet), id, [&](wire::Writer& w) {
        w.str(key);
        w.str(value);
      });
    },
    [](std::size_t n, const std::string& value) {
      std::string out;
      wire::Writer w(out);
      w.u32(wire::kMagic);
      w.u16(wire::kVersion);
      w.u16(0);
      for (std::uint32_t id = 1; id <= n; ++id) out += crun_frame(0, id, [&](wire::Writer& f) { f.str(value); });
      out += crun_frame(0, static_cast<std::uint32_t>(n + 1), [](wire::Writer&) {});
      return out;
    },
};

void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

// torch 1.x's TCPStore: GET = 2, SET = 0; no hello, no ids; SET has no answer.
const Dialect kTorch{
    "torch",
    [] { return std::string(); },
    [](std::uint32_t, const std::string& key) {
      std::string out(1, '\x02');
      put_u64(out, key.size());
      return out + key;
    },
    [](std::uint32_t, const std::string& key, const std::string& value) {
      std::string out(1, '\x00');
      put_u64(out, key.size());
      out += key;
      put_u64(out, value.size());
      return out + value;
    },
    [](std::size_t n, const std::string& value) {
      std::string out;
      for (std::size_t i = 0; i < n; ++i) {
        put_u64(out, value.size());
        out += value;
      }
      return out;
    },
};

// A client that sends requests and reads nothing until asked: a small receive buffer keeps the
// replies queued in the server rather than in the kernel.
class NonReader {
 public:
  explicit NonReader(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int small = 4096, one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~NonReader() { ::close(fd_); }
  NonReader(const NonReader&) = delete;
  NonReader& operator=(const NonReader&) = delete;

  void send(const std::string& bytes) {
    for (std::size_t off = 0; off < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      off += static_cast<std::size_t>(n);
    }
  }
  std::uint16_t port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  }
  // Everything that arrives until EOF, a reset, `n` bytes or the bound; `closed` tells whether
  // the peer closed.
  std::string read(std::size_t n, std::chrono::milliseconds bound, bool* closed = nullptr) {
    std::string out;
    std::vector<char> buf(1 << 16);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    if (closed) *closed = false;
    while (out.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t r = ::recv(fd_, buf.data(), std::min(buf.size(), n - out.size()), 0);
      if (r <= 0) {
        if (closed) *closed = true;
        break;
      }
      out.append(buf.data(), static_cast<std::size_t>(r));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// Whether `s` receives exactly `expected` (a failure names sizes, not the bytes).
bool receives(NonReader& s, const std::string& expected) {
  const std::string got = s.read(expected.size(), 30s);
  INFO("received " << got.size() << " of " << expected.size() << " bytes");
  CHECK(got.size() == expected.size());
  return got == expected;
}

void print_peak(const char* what, const Dialect& d, long long before, long long after) {
  std::printf("%s (%s): server peak %lld KiB before the gets, %lld KiB after\n", what, d.name, before / 1024, after / 1024);
}

// `crun store-server` on 127.0.0.1 with the test's bound, and a client of it.
struct BoundedServer {
  BoundedServer()
      : process({CRUN_BIN, "store-server", "--host", "127.0.0.1", "--port", "0", "--max-queued-reply-bytes", "64MiB"}) {
    REQUIRE(process.wait_for_stdout("\n", 1, 30s));
    const std::string first = process.out().substr(0, process.out().find('\n'));
    const auto colon = first.rfind(':');
    REQUIRE(colon != std::string::npos);
    endpoint = StoreEndpoint{first.substr(0, colon), static_cast<std::uint16_t>(std::stoi(first.substr(colon + 1)))};
    StoreClientOptions o;
    o.timeout = 30s;
    client = std::make_unique<TcpStore>(endpoint, o);
  }
  ~BoundedServer() {
    client.reset();
    process.signal(SIGTERM);
    process.wait_exit(30s);
  }
  // Sends hello, `gets` gets of `key` and the set of "done/<name>", which the client waits for.
  void ask(const Dialect& d, NonReader& s, std::size_t gets, const std::string& key, const std::string& name) {
    std::string requests = d.hello();
    for (std::uint32_t id = 1; id <= gets; ++id) requests += d.get(id, key);
    requests += d.set(static_cast<std::uint32_t>(gets + 1), "done/" + name, "1");
    s.send(requests);
  }
  void wait_done(const std::vector<std::string>& names) {
    std::vector<std::string> keys;
    for (auto& n : names) keys.push_back("done/" + n);
    client->wait(keys, 30s);
  }
  int dropped_lines() const { return count(process.err(), "dropped connection"); }
  ChildProcess process;
  StoreEndpoint endpoint;
  std::unique_ptr<TcpStore> client;
};

void replies_of_one_value_share_it(const Dialect& d) {
  BoundedServer server;
  const std::string value(8u << 20, 'v');  // 6 x 16 replies of it: 768 MiB if each were a copy
  server.client->set("big", value);
  const long long before = peak_bytes(server.process.pid());
  std::vector<std::unique_ptr<NonReader>> sockets;
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) {
    sockets.push_back(std::make_unique<NonReader>(server.endpoint.port));
    names.push_back(std::string(d.name) + std::to_string(i));
    server.ask(d, *sockets.back(), 16, "big", names.back());
  }
  server.wait_done(names);
  const long long after = peak_bytes(server.process.pid());
  print_peak("6 x 16 gets of 8 MiB", d, before, after);
  CHECK(after - before < static_cast<long long>(kBound / 2));
  CHECK(server.dropped_lines() == 0);
  CHECK(receives(*sockets[0], d.replies(16, value)));
  CHECK(server.client->get("big", 5s) == value);
}

void the_heaviest_reader_goes_first(const Dialect& d) {
  BoundedServer server;
  const std::string value(32u << 10, 's');  // copied into each reply
  server.client->set("small", value);
  const long long before = peak_bytes(server.process.pid());
  // 50 MiB queued for `heavy`, then 20 MiB for each of three more: the sum passes 64 MiB.
  NonReader heavy(server.endpoint.port);
  server.ask(d, heavy, 1600, "small", std::string(d.name) + "heavy");
  server.wait_done({std::string(d.name) + "heavy"});
  std::vector<std::unique_ptr<NonReader>> others;
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    others.push_back(std::make_unique<NonReader>(server.endpoint.port));
    names.push_back(std::string(d.name) + std::to_string(i));
    server.ask(d, *others.back(), 640, "small", names.back());
  }
  server.wait_done(names);
  bool closed = false;
  heavy.read(SIZE_MAX, 10s, &closed);
  CHECK(closed);
  const std::string line = "dropped connection from 127.0.0.1:" + std::to_string(heavy.port());
  CHECK(server.process.wait_until([&](const std::string&, const std::string& err) { return err.find(line) != std::string::npos; }, 10s));
  const std::string err = server.process.err();
  INFO(err);
  CHECK(server.dropped_lines() == 1);
  CHECK_THAT(err, Catch::Contains("bound of " + std::to_string(kBound) + " bytes"));
  const long long after = peak_bytes(server.process.pid());
  print_peak("1600 + 3 x 640 gets of 32 KiB", d, before, after);
  CHECK(after - before < static_cast<long long>(2 * kBound + (32u << 20) + kSanitizerSlack));
  // A fresh client is served, and so are the others, every reply of theirs.
  TcpStore fresh(server.endpoint, StoreClientOptions{});
  fresh.set("after", "yes");
  CHECK(fresh.get("after", 5s) == "yes");
  const std::string expected = d.replies(640, value);
  for (auto& s : others) CHECK(receives(*s, expected));
}

}  // namespace

TEST_CASE("replies of one large value share its bytes (crun's protocol)", "[reply_bound]") {
  replies_of_one_value_share_it(kCrun);
}

TEST_CASE("replies of one large value share its bytes (torch's TCPStore protocol)", "[reply_bound]") {
  replies_of_one_value_share_it(kTorch);
}

TEST_CASE("past the bound on queued replies the heaviest non-reader is dropped (crun's protocol)", "[reply_bound]") {
  the_heaviest_reader_goes_first(kCrun);
}

TEST_CASE("past the bound on queued replies the heaviest non-reader is dropped (torch's TCPStore protocol)",
          "[reply_bound]") {
  the_heaviest_reader_goes_first(kTorch);
}
