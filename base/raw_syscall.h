// System calls made without libc: no errno, no thread descriptor, no lock, no cancellation point.
//
// Contract
//   - raw_syscall(nr, args...) makes system call `nr` and returns the kernel's answer: >= 0, or
//     -errno. On x86-64 it is the `syscall` instruction itself, inline; elsewhere it goes through
//     libc's syscall() and turns errno back into the answer (there it is only ever used in a
//     process of its own, where errno is its own).
//   - For code that runs in a child sharing the agent's memory (the keeper, agent/keeper.h): every
//     libc wrapper would write errno, and read the cancellation state, of whichever agent thread
//     created the child, while that thread goes on running.
//   - The raw_* helpers name the calls that code needs, with the kernel's argument types.
//
// Threading
//   Any thread, async-signal-safe.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace crun {

#if defined(__x86_64__)
inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}
#else
inline long raw_syscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  const long r = ::syscall(nr, a, b, c, d, e, f);
  return r == -1 ? -errno : r;
}
#endif

inline long raw_arg(const void* p) { return reinterpret_cast<long>(p); }

inline int raw_open(const char* path, int flags) {
  return static_cast<int>(raw_syscall(SYS_openat, AT_FDCWD, raw_arg(path), flags | O_CLOEXEC, 0));
}
inline long raw_read(int fd, void* buf, std::size_t n) { return raw_syscall(SYS_read, fd, raw_arg(buf), static_cast<long>(n)); }
inline long raw_pread(int fd, void* buf, std::size_t n, long off) {
  return raw_syscall(SYS_pread64, fd, raw_arg(buf), static_cast<long>(n), off);
}
inline long raw_write(int fd, const void* buf, std::size_t n) {
  return raw_syscall(SYS_write, fd, raw_arg(buf), static_cast<long>(n));
}
inline int raw_close(int fd) { return static_cast<int>(raw_syscall(SYS_close, fd)); }
inline int raw_rmdir(const char* path) {
  return static_cast<int>(raw_syscall(SYS_unlinkat, AT_FDCWD, raw_arg(path), AT_REMOVEDIR));
}
inline int raw_kill(int pid, int sig) { return static_cast<int>(raw_syscall(SYS_kill, pid, sig)); }
inline int raw_getpid() { return static_cast<int>(raw_syscall(SYS_getpid)); }
[[noreturn]] inline void raw_exit(int code) {
  for (;;) raw_syscall(SYS_exit, code);
}

}  // namespace crun
