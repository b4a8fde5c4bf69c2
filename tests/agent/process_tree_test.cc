// No process of a worker's tree outlives the agent: real crun, real workers with a child in their
// process group (`sleep 40`) and a double-forked `sleep 40` in a session of its own, both when the
// group is stopped after a failure and when the agent itself is SIGKILLed; with the job's cgroup v2
// and with the fallback (CRUN_NO_CGROUP=1: process groups and the CRUN_AGENT_ID marker). The
// agent's temporary run dir does not outlive it either.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/agent/crun_command.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pids of "<kind> rank=R pid=P" lines.
std::vector<int> pids_of(const std::string& out, const std::string& kind) {
  std::vector<int> pids;
  const std::regex re("^" + kind + R"( rank=\d+ pid=(\d+)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) pids.push_back(std::stoi(sm[1]));
  }
  return pids;
}

// The workers' cgroup v2 paths ("cgroup rank=R PATH" lines).
std::vector<std::string> cgroups_of(const std::string& out) {
  std::vector<std::string> paths;
  static const std::regex re(R"(^cgroup rank=\d+ (.*)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) paths.push_back(sm[1]);
  }
  return paths;
}

// Where the cgroup v2 hierarchy is mounted ("" when it is not).
std::string cgroup2_mount() {
  std::istringstream in(slurp("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    fields >> id >> parent >> dev >> root >> mount;
    return mount;
  }
  return {};
}

// crun's keeper: its child named crun-keeper, the program beside crun (0 when there is none).
int keeper_of(pid_t crun) {
  const fs::path tasks = "/proc/" + std::to_string(crun) + "/task";
  for (const auto& t : fs::directory_iterator(tasks)) {
    std::istringstream children(slurp(t.path() / "children"));
    int pid = 0;
    while (children >> pid) {
      if (slurp("/proc/" + std::to_string(pid) + "/comm") == "crun-keeper\n") return pid;
    }
  }
  return 0;
}

// The agent's temporary run dir: three levels above rank 0's error file ("" when not printed).
fs::path run_dir_of(const std::string& out) {
  static const std::regex re(R"(^ENV rank=0 TORCHELASTIC_ERROR_FILE=(.*)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) return fs::path(sm[1].str()).parent_path().parent_path().parent_path();
  }
  return {};
}

struct Tree {
  std::vector<int> workers, children, daemons, bare_children;
  std::vector<std::string> cgroups;
  fs::path run_dir;
  int keeper = 0;
  std::vector<int> all() const {
    std::vector<int> v = workers;
    v.insert(v.end(), children.begin(), children.end());
    v.insert(v.end(), daemons.begin(), daemons.end());
    v.insert(v.end(), bare_children.begin(), bare_children.end());
    return v;
  }
};

// Starts 2 workers, each with a child in its process group and a daemon, and checks where they run.
Tree start_tree(ChildProcess& p, bool cgroup) {
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  Tree t;
  const std::string out = p.out();
  INFO(out);
  t.workers = pids_of(out, "ready");
  t.children = pids_of(out, "child");
  t.daemons = pids_of(out, "daemon");
  t.bare_children = pids_of(out, "bare_child");
  t.cgroups = cgroups_of(out);
  t.run_dir = run_dir_of(out);
  REQUIRE(fs::is_directory(t.run_dir / "attempt_0" / "0"));
  REQUIRE(t.workers.size() == 2);
  REQUIRE(t.children.size() == 2);
  REQUIRE(t.daemons.size() == 2);
  REQUIRE(t.bare_children.size() == 2);
  REQUIRE(t.cgroups.size() == 2);
  for (int d : t.daemons) CHECK(::getsid(d) != ::getsid(t.workers[0]));  // a session of its own
  for (const auto& cg : t.cgroups) {
    if (cgroup) {
      CHECK(cg.find("/crun-") != std::string::npos);  // the job's cgroup
      CHECK(cg == t.cgroups.front());
    } else {
      CHECK(cg.find("/crun-") == std::string::npos);
    }
  }
  t.keeper = keeper_of(p.pid());
  CHECK(t.keeper > 0);
  return t;
}

void check_gone(const Tree& t, bool cgroup) {
  for (int pid : t.all()) {
    INFO("pid " << pid);
    CHECK(wait_pid_gone(pid, 10s));
  }
  if (t.keeper > 0) CHECK(wait_pid_gone(t.keeper, 10s));
  if (cgroup && !t.cgroups.empty()) CHECK_FALSE(fs::exists(cgroup2_mount() + t.cgroups.front()));
  // The temporary run dir goes too: removed by the agent, or by its keeper when the agent died.
  CHECK_FALSE(fs::exists(t.run_dir));
}

// A bare child (no marker in its environment) is reached without a cgroup only by the kill of
// the worker's process group, which the keeper was told of.
const std::vector<std::string> kTreeWorker{"--print-cgroup", "--print-env", "--child", "--bare-child", "--daemon", "--hang"};

}  // namespace

TEST_CASE("no process of a worker's tree outlives a group stopped after a failure", "[tree]") {
  REQUIRE(::geteuid() == 0);  // the job's cgroup needs a writable cgroup v2 hierarchy (CI is root)
  const bool cgroup = GENERATE(true, false);
  INFO((cgroup ? "cgroup v2" : "fallback (CRUN_NO_CGROUP=1)"));
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--stop-timeout", "5"}, kTreeWorker),
                 cgroup ? std::vector<std::string>{} : std::vector<std::string>{"CRUN_NO_CGROUP=1"});
  const Tree t = start_tree(p, cgroup);
  ::kill(t.workers[1], SIGKILL);  // a failure with no restarts left: the group is stopped, crun exits
  REQUIRE(p.wait_exit() == 128 + SIGKILL);
  check_gone(t, cgroup);
}

TEST_CASE("no process of a worker's tree outlives an agent killed with SIGKILL", "[tree]") {
  REQUIRE(::geteuid() == 0);
  const bool cgroup = GENERATE(true, false);
  INFO((cgroup ? "cgroup v2" : "fallback (CRUN_NO_CGROUP=1)"));
  ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, kTreeWorker),
                 cgroup ? std::vector<std::string>{} : std::vector<std::string>{"CRUN_NO_CGROUP=1"});
  const Tree t = start_tree(p, cgroup);
  // A terminal's Ctrl-C or a scheduler's SIGTERM reaches the keeper too (crun's process group):
  // the keeper ignores them and is still there when crun is SIGKILLed.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1}) ::kill(t.keeper, s);
  p.signal(SIGKILL);
  REQUIRE(p.wait_exit() == 128 + SIGKILL);
  check_gone(t, cgroup);
}

TEST_CASE("orphans re-parented to the agent are reaped; the workers' own exit codes are kept", "[tree]") {
  SECTION("an orphan that exits while the workers run leaves no zombie") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "1"}, {"--orphan", "--hang"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 1));
    const auto orphans = pids_of(p.out(), "orphan");
    REQUIRE(orphans.size() == 1);
    CHECK(wait_pid_reaped(orphans[0], 10s));
    CHECK_FALSE(p.wait_exit(0ms).has_value());  // reaped by the agent, which still runs
    p.signal(SIGTERM);
    CHECK(p.wait_exit() == 128 + SIGTERM);
  }
  SECTION("orphans ending with the workers do not take a worker's exit status") {
    for (int i = 0; i < 5; ++i) {
      ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, {"--orphan", "--orphan", "--only-rank", "1", "--exit", "42"}));
      REQUIRE(p.wait_exit() == 42);
      CHECK(count(p.err(), "exit code 42") == 1);
    }
  }
}

TEST_CASE("a crashing agent's keeper ends its job", "[tree]") {
  // A core-dumping signal ends the agent; the keeper, a process of its own, lives on to end the
  // job. SIGABRT, as abort() ends it (a sanitizer build catches SIGSEGV itself).
  rlimit core{};
  ::getrlimit(RLIMIT_CORE, &core);
  core.rlim_cur = 0;
  ::setrlimit(RLIMIT_CORE, &core);  // no core file left behind (inherited by crun)
  ChildProcess crashed(crun_cmd({"--nproc-per-node", "2"}, kTreeWorker));
  const Tree gone = start_tree(crashed, true);
  crashed.signal(SIGABRT);
  REQUIRE(crashed.wait_exit() == 128 + SIGABRT);
  check_gone(gone, true);
}

TEST_CASE("a SIGKILLed agent's keeper ends its own job only", "[tree]") {
  const bool cgroup = GENERATE(true, false);
  INFO((cgroup ? "cgroup v2" : "fallback (CRUN_NO_CGROUP=1)"));
  const std::vector<std::string> env = cgroup ? std::vector<std::string>{} : std::vector<std::string>{"CRUN_NO_CGROUP=1"};
  ChildProcess killed(crun_cmd({"--nproc-per-node", "2"}, kTreeWorker), env);
  ChildProcess other(crun_cmd({"--nproc-per-node", "2"}, kTreeWorker), env);
  const Tree gone = start_tree(killed, cgroup);
  const Tree kept = start_tree(other, cgroup);
  killed.signal(SIGKILL);
  REQUIRE(killed.wait_exit() == 128 + SIGKILL);
  check_gone(gone, cgroup);  // the keeper has finished its clean-up when this returns
  for (int pid : kept.all()) {
    INFO("pid " << pid);
    CHECK(::kill(pid, 0) == 0);
  }
  other.signal(SIGTERM);
  CHECK(other.wait_exit() == 128 + SIGTERM);
  check_gone(kept, cgroup);
}

TEST_CASE("a SIGKILLed agent's keeper removes its run dir, not what a symbolic link there points to", "[tree]") {
  TempDir outside;
  std::ofstream(outside.path / "keep") << "kept";
  ChildProcess killed(crun_cmd({"--nproc-per-node", "2"}, {"--print-cgroup", "--print-env", "--child", "--bare-child", "--daemon",
                                                           "--link-in-run-dir", outside.path.string(), "--hang"}));
  const Tree gone = start_tree(killed, true);
  REQUIRE(fs::is_symlink(gone.run_dir / "attempt_0" / "0" / "link"));
  REQUIRE(fs::is_symlink(gone.run_dir / "attempt_0" / "1" / "nested" / "link"));
  killed.signal(SIGKILL);
  REQUIRE(killed.wait_exit() == 128 + SIGKILL);
  check_gone(gone, true);
  CHECK(slurp(outside.path / "keep") == "kept");
}

TEST_CASE("the job's cgroup is found where cgroup v2 is mounted at no usual place", "[tree]") {
  // crun looks at /sys/fs/cgroup and /sys/fs/cgroup/unified first and reads /proc/self/mountinfo
  // only when neither is cgroup v2. In a mount namespace of its own, a tmpfs hides both and the
  // hierarchy is mounted in a temporary directory instead: the workers are still in the job's cgroup.
  REQUIRE(::geteuid() == 0);
  TempDir dir;
  const fs::path mount = dir.path / "cgroup2";
  fs::create_directory(mount);
  std::vector<std::string> argv{"/usr/bin/unshare", "--mount", "--", "/bin/sh", "-c",
                                "mount -t cgroup2 none \"$0\" && mount -t tmpfs none /sys/fs/cgroup && exec \"$@\"",
                                mount.string()};
  for (const auto& a : crun_cmd({"--nproc-per-node", "2"}, kTreeWorker)) argv.push_back(a);
  ChildProcess p(argv);
  const Tree t = start_tree(p, true);
  p.signal(SIGTERM);
  CHECK(p.wait_exit() == 128 + SIGTERM);
  check_gone(t, true);
}
