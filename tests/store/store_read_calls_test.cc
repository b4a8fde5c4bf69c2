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
#include <thread>

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

TEST_CASE("a reply larger than the socket takes is written whole while the server serves others", "[read_calls]") {
  t_test_thread = true;
  ServerFixture f;
  auto setter = f.client();
  std::string big(16u << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  setter->set("big", big);
  // One client takes the value twice (the second request waits behind the first reply); the
  // other keeps asking for a small one meanwhile.
  std::atomic<bool> done{false};
  std::string first, second;
  std::string failure;
  std::thread reader([&] {
    t_test_thread = true;
    try {
      auto c = f.client();
      first = c->get("big", 10s);
      second = c->get("big", 10s);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    done = true;
  });
  setter->set("small", "s");
  long small_replies = 0;
  while (!done && small_replies < 100000) {
    REQUIRE(setter->get("small", 1s) == "s");
    ++small_replies;
  }
  reader.join();
  CHECK(failure.empty());
  CHECK(first == big);
  CHECK(second == big);
  CHECK(small_replies > 0);
  auto late = f.client();
  CHECK(late->get("big", 10s) == big);
}
