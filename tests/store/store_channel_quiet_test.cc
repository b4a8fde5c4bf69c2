// A channel's ordinary life (connecting, requests, a timer that fires while nothing arrives, its
// close) throws no exception on its I/O thread: each throw unwinds through tables the agent never
// touches otherwise (~30 us and three page faults at every agent's end, when its channel closed
// by an exception). A program of its own: the __cxa_throw it defines counts every throw of the
// program and hands it on to the C++ runtime's.
#include <dlfcn.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <future>

#include "store/store_channel.h"
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

TEST_CASE("a channel's requests, timer and close throw nothing", "[channel_quiet]") {
  ServerFixture f;
  const int before = g_throws.load();
  {
    StoreChannel channel(f.endpoint(), {}, [](const std::string&) {});
    const auto deadline = StoreChannel::Clock::now() + std::chrono::seconds(10);
    channel.set("k", "v", deadline);
    CHECK(channel.get("k", Millis(0), deadline) == "v");
    std::promise<void> fired;
    // The timer is set on the I/O thread (its contract): from an asynchronous request's callback.
    channel.set("t", "v", deadline, [&](std::exception_ptr) {
      channel.at(StoreChannel::Clock::now() + std::chrono::milliseconds(20), [&] { fired.set_value(); });
    });
    REQUIRE(fired.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  }
  CHECK(g_throws.load() == before);
  // The counter counts: a throw of this thread is seen.
  try {
    throw std::runtime_error("counted");
  } catch (const std::runtime_error&) {
  }
  CHECK(g_throws.load() == before + 1);
}
