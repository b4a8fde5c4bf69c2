// quiet_thread(f): a std::thread running `f` to which the kernel delivers no asynchronous signal.
//
// Contract
//   - The new thread starts with every signal blocked but those a fault raises (SIGSEGV, SIGBUS,
//     SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGABRT, so that a crash there still reaches its
//     handler (a sanitizer's report, the default core dump). A signal sent to the process
//     (SIGCHLD from a worker's exit, a terminal's SIGINT, a scheduler's SIGTERM) goes to a thread
//     that has it unblocked: the agent's event loop, whose signal handling runs there. A helper
//     thread blocked in recv() is not woken for it (EINTR, a wasted wake-up and context switch).
//   - The caller's own signal mask is unchanged when it returns; std::system_error as std::thread.
//
// Threading
//   Any thread.
#pragma once

#include <signal.h>

#include <thread>
#include <utility>

namespace crun {

template <typename F>
std::thread quiet_thread(F&& f) {
  sigset_t quiet, saved;
  sigfillset(&quiet);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&quiet, s);
  pthread_sigmask(SIG_BLOCK, &quiet, &saved);  // inherited by the new thread
  struct Restore {
    sigset_t* mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, mask, nullptr); }
  } restore{&saved};
  return std::thread(std::forward<F>(f));
}

}  // namespace crun
