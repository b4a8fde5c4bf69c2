// crun_bench_worker: the native worker of the agent benchmarks (bench/agent/run.py).
//   BENCH_STAMP=FILE    append "start <restart> <rank> <CLOCK_REALTIME ns>" at start
//   BENCH_FAIL_ONCE=1   in restart 0: rank 0 appends "fail <ns>" and exits 1; other ranks wait
//                       for the agent's stop signal (pause)
//   BENCH_FAIL_AFTER_MS=N  with BENCH_FAIL_ONCE: rank 0 runs N ms before it fails (a job an
//                       operator's scraper can see running)
//   BENCH_HOLD_MS=N     stay alive N ms before exiting 0 (for the RSS sampling)
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/bench_stamp.h"

using crun::bench::env_int;
using crun::bench::now_ns;
using crun::bench::stamp;


int main() {
  const long long start = now_ns();
  const int restart = env_int("TORCHELASTIC_RESTART_COUNT");
  const int rank = env_int("RANK");
  const char* path = std::getenv("BENCH_STAMP");
  char line[128];
  if (path) {
    std::snprintf(line, sizeof(line), "start %d %d %lld\n", restart, rank, start);
    stamp(path, line);
  }
  if (env_int("BENCH_FAIL_ONCE") != 0 && restart == 0) {
    if (rank == 0) {
      if (const int after = env_int("BENCH_FAIL_AFTER_MS"); after > 0) {
        timespec ts{after / 1000, (after % 1000) * 1000000L};
        ::nanosleep(&ts, nullptr);
      }
      if (path) {
        std::snprintf(line, sizeof(line), "fail %d %d %lld\n", restart, rank, now_ns());
        stamp(path, line);
      }
      return 1;
    }
    while (true) ::pause();
  }
  if (const int hold = env_int("BENCH_HOLD_MS"); hold > 0) {
    timespec ts{hold / 1000, (hold % 1000) * 1000000L};
    ::nanosleep(&ts, nullptr);
  }
  return 0;
}
