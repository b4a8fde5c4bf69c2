// A channel's ordinary life (connecting, requests, a timer that fires while nothing arrives, its
// close) throws no exception: each throw unwinds through tables the agent never
// touches otherwise (~30 us and three page faults at every agent's end, when its channel closed
// by an exception). A program of its own: the __cxa_throw it defines counts every throw of the
// program and hands it on to the C++ runtime's.
#include <dlfcn.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>
#include <string>

#include "store/store_channel.h"
#include "store/store_connection.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {
std::atomic<int> g_throws{0};
}  // namespace

// The compiler's own declaration of it: (object, type_info, destructor).
extern "C" [[noreturn]] void __cxa_throw(void* object, void* type, void (*destroy)(void*)) {
  ++g_throws;
  using Throw = void (*)(void*, void*, void (*)(void*));
  static const auto real = reinterpret_cast<Throw>(::dlsym(RTLD_NEXT, "__cxa_throw"));
  real(object, type, destroy);
  __builtin_unreachable();
}

TEST_CASE("a channel's connecting, requests, timer and close throw nothing", "[channel_quiet]") {
  ServerFixture f;
  boost::asio::io_context io;
  const int before = g_throws.load();
  {
    // No connection given: its helper thread connects, the loop (this thread) does the rest.
    StoreChannel channel(io, nullptr, f.endpoint(), {}, [](const std::string&) {});
    const auto deadline = StoreChannel::Clock::now() + std::chrono::seconds(10);
    bool fired = false;
    std::optional<std::string> got;
    channel.set("k", "v", deadline, [](std::exception_ptr) {});
    channel.get("k", Millis(0), deadline, [&](std::exception_ptr, std::optional<std::string> v) {
      got = std::move(v);
      channel.at(StoreChannel::Clock::now() + std::chrono::milliseconds(20), [&] { fired = true; });
    });
    const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!fired && std::chrono::steady_clock::now() < bound) io.run_one_for(std::chrono::milliseconds(50));
    REQUIRE(fired);
    CHECK(got == "v");
  }
  CHECK(g_throws.load() == before);
  // The counter counts: a throw of this thread is seen.
  try {
    throw std::runtime_error("counted");
  } catch (const std::runtime_error&) {
  }
  CHECK(g_throws.load() == before + 1);
}
