#include "base/quiet_thread.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>

using namespace crun;

namespace {
std::atomic<long> g_handled_by{0};
void record_thread(int) { g_handled_by = ::syscall(SYS_gettid); }
}  // namespace

TEST_CASE("a quiet thread blocks the process's signals, not the faults', and leaves the caller's mask", "[quiet_thread]") {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  sigset_t inside;
  sigemptyset(&inside);
  quiet_thread([&] { pthread_sigmask(SIG_SETMASK, nullptr, &inside); }).join();
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE, SIGALRM}) {
    INFO("signal " << s);
    CHECK(sigismember(&inside, s) == 1);
  }
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) {
    INFO("signal " << s);
    CHECK(sigismember(&inside, s) == 0);
  }
  sigset_t after;
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  for (int s = 1; s < 32; ++s) CHECK(sigismember(&before, s) == sigismember(&after, s));
}

TEST_CASE("a signal sent to the process while a quiet thread waits is handled by another thread", "[quiet_thread]") {
  struct sigaction sa {}, old{};
  sa.sa_handler = record_thread;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGUSR2, &sa, &old) == 0);
  const long main_tid = ::syscall(SYS_gettid);
  // The quiet thread sends the signal to the whole process; this thread, the only other one with
  // it unblocked, must be the one that runs the handler.
  std::atomic<bool> sent{false};
  std::thread t = quiet_thread([&] {
    ::kill(::getpid(), SIGUSR2);
    sent = true;
  });
  t.join();
  REQUIRE(sent);
  // Pending for this thread if not yet delivered: unblocked here, it is delivered before this returns.
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, nullptr, &none);
  CHECK(g_handled_by == main_tid);
  ::sigaction(SIGUSR2, &old, nullptr);
}
