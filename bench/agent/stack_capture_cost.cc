// What taking the workers' stacks before a kill costs (docs/benchmarks.md, "Stacks before the
// kill"): StackCapture (agent/stack_capture.h) on hung workers of this host, against a bare
// `eu-stack -s -i -m -p PID` of one process (the floor: what the capture runs per rank), all in
// one run, interleaved, medians.
//
//   stack_capture_cost [RUNS] [RANKS]   (defaults 7 and 64)
//
// Native workers are forks of this program waiting in hang_here(); Python workers are
// /usr/bin/python3 running a two-thread script hung in stuck_here(), with crun's usercustomize
// (agent/python_stacks.h) registering faulthandler as in a real job. Each figure: the wall time
// from run() to its callback. "one at a time" takes the same 64 ranks in turn, for what the
// parallel capture buys.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/python_stacks.h"
#include "agent/stack_capture.h"

extern char** environ;

using namespace crun;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

[[gnu::noinline]] void hang_here() {
  while (true) ::pause();
  asm volatile("");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd) {
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  pid_t pid = -1;
  if (posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data()) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// A bare eu-stack of `pid`, output to /dev/null: the floor.
double bare_eu_stack_ms(int pid) {
  const int null = ::open("/dev/null", O_WRONLY);
  const auto t0 = Clock::now();
  const pid_t p = spawn({"/usr/bin/eu-stack", "-s", "-i", "-m", "-p", std::to_string(pid)}, {}, null);
  int status = 0;
  ::waitpid(p, &status, 0);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ::close(null);
  return ms;
}

struct Capture {
  double ms = 0;
  int incomplete = 0;
};

Capture capture(boost::asio::io_context& io, StackCapture& c, const std::vector<CaptureTarget>& targets) {
  std::optional<std::vector<RankStack>> got;
  const auto t0 = Clock::now();
  c.run(targets, [&](std::vector<RankStack> s) { got = std::move(s); });
  io.restart();
  while (!got) io.run_one();
  Capture r;
  r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (const auto& s : *got) r.incomplete += s.error.empty() && (s.threads.size() + s.python_threads.size()) > 0 ? 0 : 1;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 7;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 64;
  std::vector<pid_t> native;
  for (int i = 0; i < ranks; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) hang_here();
    native.push_back(pid);
  }
  // Python workers, registered as crun's usercustomize registers them.
  const fs::path dir = fs::temp_directory_path() / ("stack-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream script(dir / "hung.py");
    script << "import threading, time\n\ndef stuck_here():\n    while True:\n        time.sleep(100)\n\n"
              "threading.Thread(target=lambda: time.sleep(1000), daemon=True).start()\n"
              "print('ready', flush=True)\nstuck_here()\n";
  }
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  if (const std::string why = arrange_python_stacks(env, dir / "dumps", python_stacks_signal()); !why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  std::vector<pid_t> python;
  for (int i = 0; i < ranks; ++i) {
    int ready[2];
    if (::pipe(ready) != 0) return 1;
    python.push_back(spawn({"/usr/bin/python3", "-u", (dir / "hung.py").string()}, env, ready[1]));
    ::close(ready[1]);
    char buffer[16];
    if (::read(ready[0], buffer, sizeof buffer) <= 0) return 1;  // "ready": registered, in stuck_here
    ::close(ready[0]);
  }
  auto targets = [&](const std::vector<pid_t>& pids, int n, bool py) {
    std::vector<CaptureTarget> t;
    for (int i = 0; i < n; ++i) {
      CaptureTarget x;
      x.local_rank = x.rank = i;
      x.pid = pids[static_cast<std::size_t>(i)];
      if (py) x.python_dump = python_dump_file(dir / "dumps", x.pid);
      t.push_back(x);
    }
    return t;
  };
  boost::asio::io_context io;
  StackCaptureOptions o;
  o.timeout = std::chrono::seconds(60);  // the figure, not the bound
  o.eu_stack = "/usr/bin/eu-stack";
  o.python_signal = python_stacks_signal();
  StackCapture c(io, o);
  std::vector<double> floor, one_native, one_python, all_native, all_python, serial_native;
  int incomplete = 0;
  for (int r = 0; r < runs; ++r) {
    floor.push_back(bare_eu_stack_ms(native[0]));
    auto x = capture(io, c, targets(native, 1, false));
    one_native.push_back(x.ms);
    incomplete += x.incomplete;
    x = capture(io, c, targets(python, 1, true));
    one_python.push_back(x.ms);
    incomplete += x.incomplete;
    x = capture(io, c, targets(native, ranks, false));
    all_native.push_back(x.ms);
    incomplete += x.incomplete;
    x = capture(io, c, targets(python, ranks, true));
    all_python.push_back(x.ms);
    incomplete += x.incomplete;
    double serial = 0;
    for (const auto& t : targets(native, ranks, false)) {
      x = capture(io, c, {t});
      serial += x.ms;
      incomplete += x.incomplete;
    }
    serial_native.push_back(serial);
  }
  for (pid_t p : native) ::kill(p, SIGKILL);
  for (pid_t p : python) ::kill(p, SIGKILL);
  for (pid_t p : native) ::waitpid(p, nullptr, 0);
  for (pid_t p : python) ::waitpid(p, nullptr, 0);
  fs::remove_all(dir);
  const double f = median(floor);
  std::printf("median of %d runs, %d ranks; %d capture(s) incomplete\n", runs, ranks, incomplete);
  std::printf("bare eu-stack -p, 1 native process (floor)   %9.1f ms\n", f);
  std::printf("capture, 1 native rank                       %9.1f ms  %5.2fx floor\n", median(one_native), median(one_native) / f);
  std::printf("capture, 1 Python rank (dump + eu-stack)     %9.1f ms  %5.2fx floor\n", median(one_python), median(one_python) / f);
  std::printf("capture, %d native ranks in parallel         %9.1f ms  %5.2fx floor\n", ranks, median(all_native), median(all_native) / f);
  std::printf("capture, %d native ranks one at a time       %9.1f ms  %5.2fx floor\n", ranks, median(serial_native), median(serial_native) / f);
  std::printf("capture, %d Python ranks in parallel         %9.1f ms  %5.2fx floor\n", ranks, median(all_python), median(all_python) / f);
  return 0;
}
