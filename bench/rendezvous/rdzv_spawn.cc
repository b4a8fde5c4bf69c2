// rdzv_spawn: starts N agents as fast as one process can (posix_spawn, each in its own session),
// waits for all of them with a deadline, and prints CLOCK_REALTIME stamps for run.py:
//   rdzv_spawn N TIMEOUT_S PIDFILE LOGFILE -- argv...     ("{IS_HOST}" in argv: 1 for the
//   first agent, 0 for the others)
// Output: "t0 <ns> launched <ns> exited <ns> nonzero <count> timeout <0|1> max_cpu_us <us>" (the
// largest CPU time, user + system, of one agent: with c10d the store host's); on timeout every
// agent's session is sent SIGKILL. Python's subprocess costs ~3.5 ms per process on the 2-core
// VM (1,024 x /bin/true: 3.5 s), which would otherwise weigh on the figure.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {
long long now_ns(clockid_t c = CLOCK_REALTIME) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 7 || std::strcmp(argv[5], "--") != 0) {
    std::fprintf(stderr, "usage: rdzv_spawn N TIMEOUT_S PIDFILE LOGFILE -- argv...\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const long long timeout_ns = std::atoll(argv[2]) * 1000000000LL;
  FILE* pidf = std::fopen(argv[3], "w");
  const int logfd = ::open(argv[4], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (n < 1 || !pidf || logfd < 0) return 2;
  std::vector<std::string> tmpl(argv + 6, argv + argc);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, logfd, 1);
  posix_spawn_file_actions_adddup2(&fa, logfd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);

  std::vector<pid_t> pids;
  const long long t0 = now_ns();
  int spawn_errors = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = tmpl;
    for (auto& a : args)
      if (auto p = a.find("{IS_HOST}"); p != std::string::npos)
        a = a.substr(0, p) + std::string(1, i == 0 ? '1' : '0') + a.substr(p + 9);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, av[0], &fa, &attr, av.data(), environ) != 0) {
      ++spawn_errors;
      continue;
    }
    pids.push_back(pid);
    std::fprintf(pidf, "%d\n", pid);
  }
  std::fflush(pidf);
  const long long launched = now_ns();
  const long long deadline = now_ns(CLOCK_MONOTONIC) + timeout_ns;
  std::size_t left = pids.size();
  int nonzero = spawn_errors;
  bool timed_out = false;
  long long max_cpu_us = 0;
  while (left > 0) {
    int st = 0;
    rusage ru{};
    const pid_t r = ::wait4(-1, &st, WNOHANG, &ru);
    if (r > 0) {
      --left;
      const long long cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
      if (cpu_us > max_cpu_us) max_cpu_us = cpu_us;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++nonzero;
      continue;
    }
    if (r < 0) break;
    if (now_ns(CLOCK_MONOTONIC) > deadline) {
      timed_out = true;
      for (pid_t p : pids) ::kill(-p, SIGKILL);
      for (int i = 0; i < 1000 && ::waitpid(-1, &st, 0) > 0; ++i) {
      }
      break;
    }
    timespec ts{0, 200000};  // 0.2 ms: the exit stamp is at most this late
    ::nanosleep(&ts, nullptr);
  }
  const long long exited = now_ns();
  std::printf("t0 %lld launched %lld exited %lld nonzero %d timeout %d max_cpu_us %lld\n", t0, launched, exited,
              nonzero, timed_out ? 1 : 0, max_cpu_us);
  return timed_out ? 1 : 0;
}
