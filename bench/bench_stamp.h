// Helpers for the benchmark workers: CLOCK_REALTIME timestamps appended to a shared file with
// O_APPEND (one write per line, so lines from many processes never interleave), and integer
// environment variables. Header-only; the workers are static, single-threaded programs.
#pragma once

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace crun::bench {

inline long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

inline void stamp(const char* path, const char* line) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line, std::strlen(line));
  ::close(fd);
}

inline int env_int(const char* key, int dflt = 0) {
  const char* v = std::getenv(key);
  return v ? std::atoi(v) : dflt;
}

}  // namespace crun::bench
