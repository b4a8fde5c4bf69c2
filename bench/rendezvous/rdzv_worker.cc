// rdzv_worker: the worker of the rendezvous benchmarks (bench/rendezvous/run.py).
//   RDZV_STAMP=FILE     append "start <restart> <rank> <CLOCK_REALTIME ns>" at start (O_APPEND)
//   RDZV_FAIL=1         in restart 0, local rank 1 sleeps RDZV_FAIL_DELAY_MS (default 300), appends
//                       "fail <restart> <rank> <ns>" and exits 3
//   RDZV_HOLD=1         in restart 0, the other workers stay alive until SIGTERM, then exit 0
// A failing worker first creates FILE.failed; a worker that finds it is a replacement and exits 0
// at once. (torchrun gives TORCHELASTIC_RESTART_COUNT 0 again to a node that restarts because
// another node failed, so the restart count alone cannot tell replacements apart.)
// With neither variable the worker exits 0 at once (the /bin/true of the scale benchmark).
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/bench_stamp.h"

using crun::bench::env_int;
using crun::bench::now_ns;
using crun::bench::stamp;

namespace {
void on_term(int) { ::_exit(0); }
}  // namespace

int main() {
  const long long start = now_ns();
  const int restart = env_int("TORCHELASTIC_RESTART_COUNT");
  const int rank = env_int("RANK");
  const int local_rank = env_int("LOCAL_RANK");
  const char* path = std::getenv("RDZV_STAMP");
  char line[128];
  if (path) {
    std::snprintf(line, sizeof(line), "start %d %d %lld\n", restart, rank, start);
    stamp(path, line);
  }
  if (restart != 0) return 0;
  std::string marker = path ? std::string(path) + ".failed" : std::string();
  if (path && ::access(marker.c_str(), F_OK) == 0) return 0;
  if (env_int("RDZV_FAIL") != 0 && local_rank == 1) {
    const int ms = env_int("RDZV_FAIL_DELAY_MS", 300);
    timespec ts{ms / 1000, (ms % 1000) * 1000000L};
    ::nanosleep(&ts, nullptr);
    if (path) {
      stamp(marker.c_str(), "");
      std::snprintf(line, sizeof(line), "fail %d %d %lld\n", restart, rank, now_ns());
      stamp(path, line);
    }
    return 3;
  }
  if (env_int("RDZV_HOLD") != 0) {
    ::signal(SIGTERM, on_term);
    ::signal(SIGINT, on_term);
    for (int i = 0; i < 600; ++i) ::sleep(1);  // bounded: 10 minutes at most
  }
  return 0;
}
