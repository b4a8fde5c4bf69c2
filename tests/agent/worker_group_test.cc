// WorkerGroup with real processes on a real io_context.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "agent/job_cgroup.h"
#include "agent/keeper.h"
#include "agent/worker_containment.h"
#include "agent/worker_env.h"
#include "agent/worker_group.h"
#include "agent/worker_process.h"
#include "tests/support/child_process.h"
#include "tests/support/eventually.h"

using namespace crun;
using crun::test::eventually;
using namespace std::chrono_literals;

namespace {

WorkerLaunch launch(std::vector<std::string> args, int local_rank, int tail = 20) {
  WorkerLaunch l;
  l.argv = {CRUN_TEST_WORKER};
  l.argv.insert(l.argv.end(), args.begin(), args.end());
  l.env = current_environment();
  l.env.push_back("RANK=" + std::to_string(local_rank));
  l.env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  l.stderr_route.tail_lines = static_cast<std::size_t>(tail);
  return l;
}

std::set<int> open_fds() {
  std::set<int> fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) fds.insert(std::stoi(e.path().filename()));
  return fds;
}

}  // namespace

TEST_CASE("exit codes and signals are reported; last words are routed first", "[worker_group]") {
  boost::asio::io_context io;
  std::map<int, WorkerExit> exits;
  std::map<int, std::vector<std::string>> tails;
  WorkerGroup* g = nullptr;
  WorkerGroup group(io, 0, [&](const WorkerExit& e) {
    exits[e.local_rank] = e;
    const auto& t = g->stderr_tail(e.local_rank);
    tails[e.local_rank].assign(t.begin(), t.end());
  });
  g = &group;
  std::vector<WorkerLaunch> ls;
  ls.push_back(launch({"--exit", "0"}, 0));
  ls.push_back(launch({"--stderr-lines", "30", "--last-words", "dying words", "--exit", "42"}, 1));
  ls.push_back(launch({"--raise", "SIGUSR2"}, 2));
  group.start(std::move(ls));
  REQUIRE(group.running() == 3);
  for (int i = 0; i < 3; ++i) REQUIRE(::getpgid(group.pid(i)) == group.pid(i));  // own group
  io.run_for(20s);
  REQUIRE(exits.size() == 3);
  REQUIRE(group.running() == 0);
  REQUIRE_FALSE(exits[0].failed());
  REQUIRE(exits[1].status == ExitStatus::exited(42));
  REQUIRE(exits[1].crun_exit_code() == 42);
  REQUIRE(exits[2].status == ExitStatus::killed(SIGUSR2));
  REQUIRE(exits[2].crun_exit_code() == 128 + SIGUSR2);
  REQUIRE(tails[1].size() == 20);
  REQUIRE(tails[1].back() == "dying words");
  REQUIRE(tails[1].front() == "err r=1 i=11");
}

TEST_CASE("signal_all reaches every worker's process group", "[worker_group]") {
  boost::asio::io_context io;
  int ready_pipe[2];
  REQUIRE(::pipe2(ready_pipe, O_NONBLOCK) == 0);
  std::map<int, WorkerExit> exits;
  WorkerGroup group(io, 0, [&](const WorkerExit& e) { exits[e.local_rank] = e; });
  std::vector<WorkerLaunch> ls;
  for (int r = 0; r < 2; ++r) {
    auto l = launch({"--trap", "SIGUSR1", "--hang"}, r);
    l.stdout_route.console_fd = ready_pipe[1];  // "ready" lines come here
    ls.push_back(std::move(l));
  }
  group.start(std::move(ls));
  // Wait for both "ready" lines (the handlers are installed by then), driven by the loop itself.
  std::string seen;
  while (std::count(seen.begin(), seen.end(), '\n') < 2) {
    REQUIRE(io.run_one_for(20s) > 0);
    char buf[256];
    const ssize_t n = ::read(ready_pipe[0], buf, sizeof(buf));
    if (n > 0) seen.append(buf, static_cast<std::size_t>(n));
  }
  group.signal_all(SIGUSR1);
  io.run_for(20s);
  REQUIRE(exits.size() == 2);
  REQUIRE(exits[0].status == ExitStatus::exited(0));  // the trap exits 0
  REQUIRE(exits[1].status == ExitStatus::exited(0));
  ::close(ready_pipe[0]);
  ::close(ready_pipe[1]);
}

TEST_CASE("destroying the group kills workers that still run", "[worker_group]") {
  boost::asio::io_context io;
  int pid = 0;
  {
    WorkerGroup group(io, 0, [](const WorkerExit&) {});
    std::vector<WorkerLaunch> ls;
    ls.push_back(launch({"--ignore-term", "--hang"}, 0));
    group.start(std::move(ls));
    pid = group.pid(0);
  }
  REQUIRE(::kill(pid, 0) == -1);  // reaped by the destructor
}

TEST_CASE("resolve_executable searches PATH", "[worker_group]") {
  REQUIRE(resolve_executable("sh", "/nonexistent:/bin") == std::optional<std::string>("/bin/sh"));
  REQUIRE_FALSE(resolve_executable("sh", "/nonexistent").has_value());
  REQUIRE(resolve_executable("/bin/sh", "") == std::optional<std::string>("/bin/sh"));
  REQUIRE_FALSE(resolve_executable("crun-no-such-program", "/bin:/usr/bin").has_value());
  REQUIRE_FALSE(resolve_executable("/tmp", "/bin").has_value());
}

TEST_CASE("the event loop's, the signal set's, timers' and workers' descriptors are close-on-exec", "[worker_group]") {
  const std::set<int> before = open_fds();
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGUSR2);  // Asio's process-wide signal pipe
  signals.async_wait([](const boost::system::error_code&, int) {});
  boost::asio::steady_timer timer(io);  // epoll, its eventfd interrupter and timerfd
  bool fired = false;
  timer.expires_after(1ms);
  timer.async_wait([&](const boost::system::error_code&) { fired = true; });
  WorkerGroup group(io, 0, [](const WorkerExit&) {});  // pidfd and the output pipes
  std::vector<WorkerLaunch> ls;
  ls.push_back(launch({"--hang"}, 0));
  group.start(std::move(ls));
  while (!fired) REQUIRE(io.run_one_for(20s) > 0);
  const std::set<int> now = open_fds();
  int checked = 0;
  for (int fd : now) {
    if (before.count(fd) != 0) continue;
    std::error_code ec;
    INFO("fd " << fd << " -> " << std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec).string());
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) continue;  // the directory listing's own descriptor, closed since
    CHECK((flags & FD_CLOEXEC) != 0);
    ++checked;
  }
  CHECK(checked >= 6);  // epoll, eventfd, timerfd, the signal pipe's two ends, a pidfd, two pipes
  signals.cancel();
}

std::string proc_text(int pid, const char* file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The hexadecimal mask after `field` in /proc/<pid>/status ("SigCgt:\t0000000000000000").
unsigned long long status_mask(int pid, const std::string& field) {
  const std::string status = proc_text(pid, "status");
  const auto at = status.find(field + ":");
  if (at == std::string::npos) return ~0ull;
  return std::stoull(status.substr(at + field.size() + 1), nullptr, 16);
}

TEST_CASE("the keeper is crun-keeper, with nothing of the agent's but stderr and its pipe", "[worker_group]") {
  int keeper = 0;
  // A handler of the agent's (as asio's signal_set installs) and a descriptor without
  // close-on-exec: the keeper keeps neither.
  struct sigaction handler {}, saved{};
  handler.sa_handler = [](int) {};
  REQUIRE(::sigaction(SIGALRM, &handler, &saved) == 0);
  const int stray = ::open("/dev/null", O_RDONLY);
  REQUIRE(stray >= 0);
  {
    // A cgroup dir that is not there: the keeper's clean-up fails (and says so on stderr).
    Keeper k(CRUN_KEEPER_BIN, "/nonexistent/crun-keeper-test", "CRUN_AGENT_ID=keeper-test", "");
    keeper = k.pid();
    REQUIRE(keeper > 0);
    std::error_code ec;
    CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(keeper) + "/exe", ec) ==
          std::filesystem::canonical(CRUN_KEEPER_BIN, ec));
    CHECK(proc_text(keeper, "comm") == "crun-keeper\n");
    // Started with every signal blocked, it unblocks them once the terminal's and a scheduler's
    // are ignored; no handler of the agent's; descriptors 0-2 and the pipe only; the current
    // directory /.
    CHECK(eventually([&] { return status_mask(keeper, "SigBlk") == 0; }, 5s));
    CHECK((status_mask(keeper, "SigCgt") >> (SIGALRM - 1) & 1) == 0);  // (a sanitizer's runtime catches SIGSEGV, SIGBUS, SIGFPE)
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
      INFO("signal " << s);
      CHECK((status_mask(keeper, "SigIgn") >> (s - 1) & 1) == 1);
    }
    std::set<std::string> fds;
    CHECK(eventually([&] {
      fds.clear();
      for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(keeper) + "/fd", ec)) {
        fds.insert(e.path().filename().string());
      }
      return fds == std::set<std::string>{"0", "1", "2", "3"};
    }, 5s));
    CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(keeper) + "/fd/0", ec) == "/dev/null");
    CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(keeper) + "/fd/3", ec).string().rfind("pipe:", 0) == 0);
    CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(keeper) + "/cwd", ec) == "/");
    k.worker_started(12345678);  // a group that does not exist: the normal end kills no group
    k.finish();
  }
  ::close(stray);
  ::sigaction(SIGALRM, &saved, nullptr);
  CHECK(crun::test::wait_pid_gone(keeper, 1s));  // reaped by finish()
}

TEST_CASE("a keeper that is not there is one error naming it, and leaves nothing open", "[worker_group]") {
  const auto before = open_fds();
  try {
    Keeper k("/nonexistent/crun-keeper", "", "CRUN_AGENT_ID=missing-test", "");
    FAIL("a keeper that is not there started");
  } catch (const std::system_error& e) {
    const std::string what = e.what();
    CHECK(what.find("/nonexistent/crun-keeper") != std::string::npos);
    CHECK(what.find("No such file or directory") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK(open_fds() == before);
}

TEST_CASE("a job cgroup's destructor removes it only while its removal is not the keeper's", "[worker_group]") {
  REQUIRE(::geteuid() == 0);  // a writable cgroup v2 hierarchy (CI is root)
  const std::string id = "cgroup-test-" + std::to_string(::getpid());
  std::string dir;
  {
    auto cgroup = crun::JobCgroup::create(id);
    REQUIRE(cgroup != nullptr);
    dir = cgroup->dir();
    CHECK(std::filesystem::is_directory(dir));
  }
  CHECK_FALSE(std::filesystem::exists(dir));  // no keeper: the destructor removes it
  {
    auto cgroup = crun::JobCgroup::create(id);
    REQUIRE(cgroup != nullptr);
    cgroup->keeper_removes();
    // The keeper removed it, and the name was made again: not this object's to touch (and an
    // rmdir of a name that is gone would still take the parent directory's lock).
    REQUIRE(crun::kill_and_remove_cgroup(cgroup->dir().c_str(), 1000));
    REQUIRE(::mkdir(cgroup->dir().c_str(), 0755) == 0);
  }
  CHECK(std::filesystem::is_directory(dir));
  CHECK(::rmdir(dir.c_str()) == 0);
}

TEST_CASE("crun-keeper without an agent's pipe and marker does nothing", "[worker_group]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {CRUN_KEEPER_BIN}, {CRUN_KEEPER_BIN, "", "PATH=/usr/bin", ""}, {CRUN_KEEPER_BIN, "", "CRUN_AGENT_ID=x", ""},
           {CRUN_KEEPER_BIN, "", "CRUN_AGENT_ID=x", "", "y"}}) {
    crun::test::ChildProcess p(args);
    REQUIRE(p.wait_exit(10s) == 2);  // run by hand: no process killer
    CHECK(p.out().empty());
    CHECK(p.err().find("started by a crun agent only") != std::string::npos);
  }
}

TEST_CASE("a worker started with a CPU list runs on exactly those CPUs (--numa-binding)", "[worker_group]") {
  boost::asio::io_context io;
  std::vector<std::string> tail;
  std::optional<WorkerExit> exit;
  WorkerGroup* g = nullptr;
  WorkerGroup group(io, 0, [&](const WorkerExit& e) {
    exit = e;
    const auto& t = g->stderr_tail(e.local_rank);
    tail.assign(t.begin(), t.end());
  });
  g = &group;
  WorkerLaunch l;
  l.argv = {"/bin/sh", "-c", "grep Cpus_allowed_list: /proc/self/status >&2"};
  l.env = current_environment();
  cpu_set_t mine;  // the lowest CPU this test may use (CPU 0 on an unrestricted host)
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  l.cpus = {cpu};
  l.stderr_route.tail_lines = 5;
  std::vector<WorkerLaunch> ls;
  ls.push_back(std::move(l));
  group.start(std::move(ls));
  io.run_for(20s);
  REQUIRE(exit);
  REQUIRE_FALSE(exit->failed());
  REQUIRE(tail.size() == 1);
  const auto& line = tail.front();
  CHECK(line.substr(line.find_first_not_of(" \t", line.find(':') + 1)) == std::to_string(cpu));
}
