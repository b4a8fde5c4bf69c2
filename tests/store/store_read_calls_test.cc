// How the server reads and writes its connections (store/readiness_set.h), counted at the system
// call. A request/reply client costs the server one recv() a request: the server reads a
// connection only after epoll reported input. Boost 1.81's async_read_some tried a recv() first
// on every read and most of those failed with EAGAIN (0.78 a request with 16 clients), a system
// call the bare epoll echo does not make. A program of its own: the recv() it defines is every
// recv() it makes, and it counts those of threads other than the test's own (the server's).
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>

#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {
thread_local bool t_test_thread = false;
std::atomic<long> g_server_recvs{0};
std::atomic<long> g_server_recvs_empty{0};  // failed with EAGAIN: nothing to read
}  // namespace

extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
  const long n = ::syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr);
  if (!t_test_thread) {
    const int saved = errno;
    ++g_server_recvs;
    if (n < 0 && (saved == EAGAIN || saved == EWOULDBLOCK)) ++g_server_recvs_empty;
    errno = saved;
  }
  return n;
}

TEST_CASE("the server reads a request/reply connection once a request, never in vain", "[read_calls]") {
  t_test_thread = true;
  ServerFixture f;
  auto c = f.client();
  c->set("k", "v");
  const long calls_before = g_server_recvs, empty_before = g_server_recvs_empty;
  constexpr long kRequests = 2000;
  for (long i = 0; i < kRequests; ++i) REQUIRE(c->get("k", 1s) == "v");
  const long calls = g_server_recvs - calls_before, empty = g_server_recvs_empty - empty_before;
  INFO("server recv() calls " << calls << ", of them empty " << empty << ", for " << kRequests << " requests");
  CHECK(calls >= kRequests);  // the count sees the server's reads
  CHECK(empty <= kRequests / 100);
  CHECK(calls <= kRequests + kRequests / 100);
}

TEST_CASE("replies larger than the socket takes wait for room while others are served, then arrive whole",
          "[read_calls]") {
  t_test_thread = true;
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
