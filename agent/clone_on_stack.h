// clone3 with a child that runs a function on a stack the caller provides.
//
// Contract
//   - CRUN_CLONE_ON_STACK is defined where clone_on_stack() exists: x86-64. Elsewhere the callers
//     keep their fallbacks (vfork, fork + exec). CRUN_SANITIZER_BUILD is defined in a sanitizer
//     build: the runtimes know nothing of a second flow of execution in the process's memory, so
//     there a caller leaves CLONE_VM out (the child gets a copy of the memory, as after fork, and
//     runs the same code).
//   - clone_on_stack(args, size, fn, arg) makes clone3(args, size); the child starts on
//     args->stack (args->stack_size bytes), runs fn(arg) and exits with its result. The parent
//     gets the child's pid, or -errno. glibc has no wrapper that runs a function on the child's
//     stack with clone3, so a few instructions do.
//   - The child shares the caller's memory when args->flags has CLONE_VM; with CLONE_VFORK (the
//     caller waits until it execs or exits), as worker_process.cc makes it, it may do what a
//     vfork child may: system calls, no allocation, no lock, nothing written that the caller
//     reads. It runs with all signals blocked (the caller blocks them around the call) until it
//     has reset the handlers it inherited, or is born without them (CLONE_CLEAR_SIGHAND).
//
// Threading
//   Any thread.
#pragma once

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CRUN_SANITIZER_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRUN_SANITIZER_BUILD 1
#endif
#if defined(__x86_64__)
#define CRUN_CLONE_ON_STACK 1
#endif

struct clone_args;

namespace crun {

#ifdef CRUN_CLONE_ON_STACK
long clone_on_stack(clone_args* args, std::size_t size, int (*fn)(void*), void* arg);
#endif

}  // namespace crun
