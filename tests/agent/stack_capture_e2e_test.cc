// Stacks before the kill (docs/operations.md), end to end: real crun, real workers (native and
// Debian's /usr/bin/python3), real eu-stack; a worker stopped by SIGSTOP, one held by another
// tracer, an eu-stack that never answers; crun as an unprivileged user.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "crun_command.h"
#include "tests/agent/failure_report_file.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

bool has_frame(const nlohmann::json& threads, const std::string& start) {
  for (const auto& t : threads) {
    for (const auto& f : t) {
      if (f.get<std::string>().rfind(start, 0) == 0) return true;
    }
  }
  return false;
}

// Ranks 0 and 1 of `report` both caught in hang_in_named_function, with no error.
void check_both_native_hung(const nlohmann::json& report) {
  for (int rank : {0, 1}) {
    const auto* s = stacks_of(report, rank);
    REQUIRE(s != nullptr);
    CHECK((*s)["error"] == "");
    CHECK(has_frame((*s)["threads"], "hang_in_named_function"));
    CHECK((*s)["python_threads"].empty());
  }
}

// "ready rank=R pid=P" -> P.
int ready_pid(const std::string& out, int rank) {
  std::smatch m;
  const std::regex re("ready rank=" + std::to_string(rank) + " pid=(\\d+)");
  return std::regex_search(out, m, re) ? std::stoi(m[1]) : -1;
}

// The PATH with `dir` first.
std::string path_with(const fs::path& dir) {
  const char* path = std::getenv("PATH");
  return "PATH=" + dir.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin");
}

// A Python worker at `path`: its imports (os, sys, threading, time), then one function per name
// of `hangs` that sleeps for ever, the sleep of the i-th (from 0) at line 6 + 5 i, then `rest`
// from line 4 + 5 * hangs.size() on. The report's frames name those lines.
fs::path python_hangs(const fs::path& path, const std::vector<std::string>& hangs, const std::string& rest) {
  std::ofstream out(path);
  out << "import os, sys, threading, time\n";
  for (const auto& name : hangs) out << "\n\ndef " << name << "():\n    while True:\n        time.sleep(100)\n";
  out << "\n\n" << rest;
  return path;
}

// Yama's ptrace_scope set to 1 (only a process's ancestors, and those it names with
// PR_SET_PTRACER, may attach: Ubuntu's default) while this lives, put back as it was when it
// goes, however the test ends. On a kernel without Yama it sets nothing and says so in one line.
class YamaScopeOne {
 public:
  YamaScopeOne() {
    std::ifstream in(kPath);
    present_ = static_cast<bool>(std::getline(in, old_));
    if (!present_) {
      std::printf("Yama is absent (no %s): the unprivileged capture ran under plain same-uid ptrace rules\n", kPath);
      return;
    }
    set_ = write("1");
    std::printf("Yama: %s set to 1 (was %s) for the unprivileged capture%s\n", kPath, old_.c_str(), set_ ? "" : ": FAILED");
  }
  ~YamaScopeOne() {
    if (set_ && !write(old_)) std::printf("Yama: could not put %s back to %s\n", kPath, old_.c_str());
  }
  YamaScopeOne(const YamaScopeOne&) = delete;
  YamaScopeOne& operator=(const YamaScopeOne&) = delete;
  bool present() const { return present_; }
  bool set() const { return set_; }

 private:
  static constexpr const char* kPath = "/proc/sys/kernel/yama/ptrace_scope";
  static bool write(const std::string& value) {
    std::ofstream out(kPath);
    out << value << '\n';
    out.flush();
    return static_cast<bool>(out);
  }
  bool present_ = false;
  bool set_ = false;
  std::string old_;
};

}  // namespace

TEST_CASE("stacks: a native worker hung in a named function is named on the console and in the report", "[stacks]") {
  TempDir dir;
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--initial-heartbeat-timeout", "1", "--log-dir", (dir.path / "logs").string()},
                          {"--hang-in-named-function"}));
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
  INFO(p.err());
  std::smatch m;
  const std::string err = p.err();
  REQUIRE(std::regex_search(err, m, std::regex(R"(crun: rank (\d) \(local rank \d\) was in hang_in_named_function(\(\))?( \(test_worker\.cc:\d+\))?\n)")));
  const int hung = std::stoi(m[1]);
  CHECK(p.err().find("took the stacks of 2 local worker(s)") != std::string::npos);
  CHECK(p.err().find("crun:   stack: rank " + std::to_string(hung) + " was in hang_in_named_function") != std::string::npos);
  check_both_native_hung(read_report(dir.path / "logs"));
}

TEST_CASE("stacks: a failure while other ranks run takes theirs before the SIGTERM that ends them", "[stacks]") {
  TempDir dir;
  SECTION("captured") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--log-dir", (dir.path / "logs").string()},
                            {"--hang-in-named-function", "--only-rank", "1", "--fail-on-signal", "SIGUSR1", "--exit", "3"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 2));
    ::kill(ready_pid(p.out(), 1), SIGUSR1);
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 3);
    INFO(p.err());
    CHECK(p.err().find("took the stacks of 1 local worker(s)") != std::string::npos);
    const auto report = read_report(dir.path / "logs");
    CHECK(report["rank"] == 1);
    const auto* s = stacks_of(report, 0);  // pause() ends at SIGTERM: a stack means it came first
    REQUIRE(s != nullptr);
    CHECK(has_frame((*s)["threads"], "hang_in_named_function"));
    CHECK(stacks_of(report, 1) == nullptr);  // the root cause had exited
  }
  SECTION("--capture-timeout 0: none") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--capture-timeout", "0", "--log-dir", (dir.path / "logs").string()},
                            {"--hang-in-named-function", "--only-rank", "1", "--fail-on-signal", "SIGUSR1", "--exit", "3"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 2));
    ::kill(ready_pid(p.out(), 1), SIGUSR1);
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 3);
    CHECK(p.err().find("took the stacks") == std::string::npos);
    CHECK_FALSE(read_report(dir.path / "logs").contains("stacks"));
  }
}

TEST_CASE("stacks: an eu-stack that never answers is killed at the bound; the stop goes on", "[stacks]") {
  TempDir dir;
  // An eu-stack first on PATH that waits for ever (its stdout open): only the bound ends it.
  const fs::path bin = dir.path / "bin";
  fs::create_directories(bin);
  {
    std::ofstream script(bin / "eu-stack");
    script << "#!/bin/sh\nexec sleep 600\n";
  }
  fs::permissions(bin / "eu-stack", fs::perms::owner_all);
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--capture-timeout", "1", "--log-dir", (dir.path / "logs").string()},
                          {"--hang-in-named-function", "--only-rank", "1", "--fail-on-signal", "SIGUSR1", "--exit", "3"}),
                 {path_with(bin)});
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  const auto failed_at = std::chrono::steady_clock::now();
  ::kill(ready_pid(p.out(), 1), SIGUSR1);
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 3);
  const auto took = std::chrono::steady_clock::now() - failed_at;
  INFO(p.err());
  const auto report = read_report(dir.path / "logs");
  const auto* s = stacks_of(report, 0);
  REQUIRE(s != nullptr);
  CHECK((*s)["error"] == "timed out after 1 s");
  CHECK(p.err().find("(1 incomplete)") != std::string::npos);
  CHECK(took < std::chrono::seconds(10));  // 1 s bound, then SIGTERM ends the worker: far below
}

TEST_CASE("stacks: a SIGSTOPped worker and a worker held by another tracer delay nothing beyond the bound", "[stacks]") {
  TempDir dir;
  ChildProcess p(crun_cmd({"--nproc-per-node", "3", "--capture-timeout", "2", "--stop-timeout", "1", "--log-dir",
                           (dir.path / "logs").string()},
                          {"--hang-in-named-function", "--only-rank", "2", "--fail-on-signal", "SIGUSR1", "--exit", "3"}));
  REQUIRE(p.wait_for_stdout("ready rank=", 3));
  const int stopped = ready_pid(p.out(), 0), held = ready_pid(p.out(), 1);
  REQUIRE(::kill(stopped, SIGSTOP) == 0);
  // The holder seizes rank 1 and never lets a stop go: it ends only with its tracee.
  int seized[2];
  REQUIRE(::pipe(seized) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    const char ok = ::ptrace(PTRACE_SEIZE, held, nullptr, nullptr) == 0 ? 'y' : 'n';
    (void)!::write(seized[1], &ok, 1);
    int status = 0;
    while (::waitpid(held, &status, __WALL) == held && !WIFEXITED(status) && !WIFSIGNALED(status)) {
    }
    ::_exit(0);
  }
  char ok = 0;
  REQUIRE(::read(seized[0], &ok, 1) == 1);
  REQUIRE(ok == 'y');
  const auto failed_at = std::chrono::steady_clock::now();
  ::kill(ready_pid(p.out(), 2), SIGUSR1);
  const auto code = p.wait_exit(std::chrono::seconds(30));
  const auto took = std::chrono::steady_clock::now() - failed_at;
  int holder_status = 0;
  ::waitpid(holder, &holder_status, 0);
  ::close(seized[0]);
  ::close(seized[1]);
  REQUIRE(code == 3);
  INFO(p.err());
  const auto report = read_report(dir.path / "logs");
  const auto* s0 = stacks_of(report, 0);
  REQUIRE(s0 != nullptr);  // eu-stack reads a stopped process as well
  CHECK(has_frame((*s0)["threads"], "hang_in_named_function"));
  const auto* s1 = stacks_of(report, 1);
  REQUIRE(s1 != nullptr);
  CHECK((*s1)["error"].get<std::string>().find("Operation not permitted") != std::string::npos);  // another tracer
  CHECK((*s1)["threads"].empty());
  // Capture (2 s at most), stop grace (1 s), SIGKILL's grace (1 s): never the 30 s a wait would take.
  CHECK(took < std::chrono::seconds(15));
}

TEST_CASE("stacks: a Python worker hung in stuck_here() is named, every thread's Python stack in the report", "[stacks]") {
  TempDir dir;
  const fs::path script = python_hangs(dir.path / "hung.py", {"stuck_here"},  // its sleep at line 6
                                        "threading.Thread(target=lambda: time.sleep(1000), daemon=True).start()\n"  // 9
                                        "print('ready rank=%s pid=%d path0=%s pythonpath=%s' % (os.environ['RANK'], "
                                        "os.getpid(), sys.path[0], os.environ.get('PYTHONPATH')), flush=True)\n"
                                        "stuck_here()\n");
  SECTION("cold starts, with Python stacks") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "2", "--initial-heartbeat-timeout", "2", "--log-dir",
                    (dir.path / "logs").string(), script.string()},
                   {"PYTHON_EXEC=/usr/bin/python3", "PYTHONPATH=/nonexistent-user-path"});
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
    INFO(p.err());
    // What the program sees is a cold start's: its own sys.path[0], PYTHONPATH as given.
    CHECK(p.out().find("path0=" + dir.path.string() + " pythonpath=/nonexistent-user-path") != std::string::npos);
    CHECK(std::regex_search(p.err(), std::regex(R"(crun: rank \d \(local rank \d\) was in stuck_here \(hung\.py:6\))")));
    const auto report = read_report(dir.path / "logs");
    for (int rank : {0, 1}) {
      const auto* s = stacks_of(report, rank);
      REQUIRE(s != nullptr);
      CHECK((*s)["error"] == "");
      REQUIRE((*s)["python_threads"].size() == 2);  // the main thread and the sleeper
      CHECK((*s)["python_threads"][1][0] == "stuck_here (hung.py:6)");
      CHECK(has_frame((*s)["python_threads"], "<lambda> (hung.py:9)"));
      CHECK(!(*s)["threads"].empty());  // and the native stacks
    }
  }
  SECTION("a standby's worker (the second start) too") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", "--max-restarts", "1",
                    "--standby-workers", "--standby-preload", "json", "--log-dir", (dir.path / "logs").string(), script.string()},
                   {"PYTHON_EXEC=/usr/bin/python3"});
    REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 137);
    INFO(p.err());
    CHECK(p.err().find("starts cold") == std::string::npos);  // the second start was the standby's
    CHECK(p.out().find("path0=" + dir.path.string() + " pythonpath=None") != std::string::npos);
    const auto report = read_report(dir.path / "logs");
    CHECK(report["attempt"] == 1);
    const auto* s = stacks_of(report, 0);
    REQUIRE(s != nullptr);
    CHECK(has_frame((*s)["python_threads"], "stuck_here (hung.py:6)"));
  }
  SECTION("--no-python-stacks: native only") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--initial-heartbeat-timeout", "2", "--no-python-stacks", "--log-dir",
                    (dir.path / "logs").string(), script.string()},
                   {"PYTHON_EXEC=/usr/bin/python3"});
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
    INFO(p.err());
    CHECK(p.out().find("pythonpath=None") != std::string::npos);
    const auto report = read_report(dir.path / "logs");
  const auto* s = stacks_of(report, 0);
    REQUIRE(s != nullptr);
    CHECK((*s)["python_threads"].empty());
    CHECK(!(*s)["threads"].empty());
  }
}

TEST_CASE("stacks: a Python worker that exec'd another program gets no dump signal (its default action would end it)",
          "[stacks]") {
  TempDir dir;
  const fs::path script = dir.path / "execs.py";
  {
    std::ofstream out(script);
    // Rank 1 becomes sh, then sleep: the same pid, its dump file still there, no handler any more.
    // Rank 0 fails once that exec is done (sh's file says so), which takes rank 1's stacks.
    out << "import os, sys, time\n"
           "sync = os.path.join(" << std::quoted(dir.path.string()) << ", 'execd')\n"
           "if os.environ['RANK'] == '1':\n"
           "    os.execv('/bin/sh', ['sh', '-c', 'touch \"$0\"; exec sleep 1000', sync])\n"
           "deadline = time.monotonic() + 30\n"
           "while not os.path.exists(sync) and time.monotonic() < deadline:\n"
           "    time.sleep(0.01)\n"
           "sys.exit(1)\n";
  }
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "2", "--log-dir", (dir.path / "logs").string(), script.string()},
                 {"PYTHON_EXEC=/usr/bin/python3"});
  const auto code = p.wait_exit(std::chrono::seconds(30));
  INFO(p.err());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(fs::exists(dir.path / "execd"));
  const auto report = read_report(dir.path / "logs");
  const auto* s = stacks_of(report, 1);
  REQUIRE(s != nullptr);
  CHECK((*s)["error"] == "");  // sent the signal, sleep would have died of it: no dump, no eu-stack
  CHECK((*s)["python_threads"].empty());
  CHECK(!(*s)["threads"].empty());
}

TEST_CASE("stacks: a native worker's environment is left as torchrun gives it (no Python stacks' variables)", "[stacks]") {
  // Arguments a Python command line could have: only the launcher's runs_python makes it Python.
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "1", "--no-python", "/usr/bin/env", "-u", "X", "--", "/usr/bin/env"},
                 {"PYTHONPATH=/given"});
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 0);
  INFO(p.out() << p.err());
  CHECK(p.out().find("CRUN_PYTHON_STACKS") == std::string::npos);
  CHECK(p.out().find("PYTHONPATH=/given\n") != std::string::npos);
  CHECK(p.err().find("Python stacks") == std::string::npos);
}

TEST_CASE("stacks: crun run by an unprivileged user takes them too, under Yama ptrace_scope=1 where the kernel has Yama",
          "[stacks]") {
  // Where Yama is, eu-stack (the agent's child, no ancestor of a worker) may attach only because
  // each worker named the agent with PR_SET_PTRACER (agent/worker_process.cc).
  const YamaScopeOne yama;
  if (yama.present()) REQUIRE(yama.set());
  TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
  // The programs copied where nobody reaches them: the build tree may lie under a folder only root
  // may enter (a clone in a mktemp -d). crun-keeper goes beside crun, where crun looks for it.
  const fs::path bin = dir.path / "bin";
  fs::create_directories(bin);
  fs::copy_file(CRUN_BIN, bin / "crun");
  fs::copy_file(fs::path(CRUN_BIN).parent_path() / "crun-keeper", bin / "crun-keeper");
  fs::copy_file(CRUN_TEST_WORKER, bin / "crun_test_worker");
  REQUIRE(::chmod(bin.c_str(), 0755) == 0);
  // Under a sanitizer whose reports go to the build's folder and whose suppressions are in the
  // checkout (scripts/sanitize.sh), nobody may reach neither: its reports go here instead (any of
  // them fails this test), and its suppressions are copied here.
  const fs::path reports = dir.path / "sanitizer-reports";
  fs::create_directories(reports);
  REQUIRE(::chmod(reports.c_str(), 0777) == 0);
  std::vector<std::string> env{"CRUN_NO_CGROUP=1", "HOME=" + dir.path.string()};
  for (const char* tool : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"}) {
    const char* options = std::getenv(tool);
    if (options == nullptr) continue;
    std::string o = options;
    // Each "key=path" option's value replaced by `path`.
    auto set = [&o](const std::string& key, const std::string& path) {
      const auto at = o.find(key + "=");
      if (at == std::string::npos || (at > 0 && o[at - 1] != ':')) return std::string();
      const auto end = o.find(':', at);
      const std::string old = o.substr(at + key.size() + 1, end == std::string::npos ? std::string::npos : end - at - key.size() - 1);
      o.replace(at, end == std::string::npos ? std::string::npos : end - at, key + "=" + path);
      return old;
    };
    set("log_path", (reports / tool).string());
    const fs::path supp = dir.path / (std::string(tool) + ".supp");
    if (const std::string given = set("suppressions", supp.string()); !given.empty()) {
      fs::copy_file(given, supp);
      REQUIRE(::chmod(supp.c_str(), 0644) == 0);
    }
    env.push_back(std::string(tool) + "=" + o);
  }
  ChildProcess p({"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", (bin / "crun").string(),
                  "--nproc-per-node", "2", "--initial-heartbeat-timeout", "1", "--log-dir", (dir.path / "logs").string(),
                  "--no-python", (bin / "crun_test_worker").string(), "--hang-in-named-function"},
                 env);
  const auto code = p.wait_exit(std::chrono::seconds(30));
  INFO(p.err());
  for (const auto& report : fs::directory_iterator(reports)) {
    std::ifstream in(report.path());
    std::stringstream text;
    text << in.rdbuf();
    FAIL_CHECK("sanitizer report " << report.path() << ":\n" << text.str());
  }
  REQUIRE(code.has_value());
  REQUIRE(*code == 137);
  CHECK(std::regex_search(p.err(), std::regex(R"(crun: rank \d \(local rank \d\) was in hang_in_named_function)")));
  check_both_native_hung(read_report(dir.path / "logs"));
}

TEST_CASE("stacks: a Python dump without its main thread ends by quiet; a stopped Python worker's by the half bound",
          "[stacks]") {
  TempDir dir;
  const fs::path script = python_hangs(dir.path / "mixed.py", {"stuck_in_thread", "stuck_here"},  // lines 6 and 11
                                        "print('ready rank=%s pid=%d' % (os.environ['RANK'], os.getpid()), flush=True)\n"
                                        "if os.environ['RANK'] == '0':\n"
                                        "    threading.Thread(target=stuck_in_thread).start()  # the main thread ends; this one stays\n"
                                        "else:\n"
                                        "    stuck_here()\n");
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "2", "--initial-heartbeat-timeout", "3", "--capture-timeout", "2", "--log-dir",
                  (dir.path / "logs").string(), script.string()},
                 {"PYTHON_EXEC=/usr/bin/python3"});
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  REQUIRE(::kill(ready_pid(p.out(), 1), SIGSTOP) == 0);
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
  INFO(p.err());
  const auto report = read_report(dir.path / "logs");
  const auto* quiet = stacks_of(report, 0);
  REQUIRE(quiet != nullptr);
  CHECK((*quiet)["error"] == "");
  CHECK(has_frame((*quiet)["python_threads"], "stuck_in_thread (mixed.py:6)"));
  // The main thread waits in threading's shutdown: the dump's last frame is not "<module>", so
  // only the quiet after the last write says it is over.
  REQUIRE(!(*quiet)["python_threads"].empty());
  CHECK((*quiet)["python_threads"].back().back().get<std::string>().rfind("<module>", 0) != 0);
  const auto* stopped = stacks_of(report, 1);
  REQUIRE(stopped != nullptr);
  CHECK((*stopped)["error"] == "Python stack: timed out after 1 s");
  CHECK((*stopped)["python_threads"].empty());
  CHECK(!(*stopped)["threads"].empty());  // eu-stack still read it, in the other half
}

namespace {

// How many inotify instances `pid` holds now.
int inotify_instances(int pid) {
  int n = 0;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code ec2;
    if (fs::read_symlink(fd.path(), ec2).string() == "anon_inode:inotify") ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("stacks: Python dumps awaited on four ranks take one inotify instance (the user's are few)", "[stacks]") {
  TempDir dir;
  // The ready line from inside stuck_here(): a rank stopped at once is in it.
  const fs::path script = dir.path / "hung.py";
  std::ofstream(script) << "import os, time\n\n\n"
                           "def stuck_here():\n"
                           "    print('ready rank=%s pid=%d' % (os.environ['RANK'], os.getpid()), flush=True)\n"
                           "    while True:\n"
                           "        time.sleep(100)\n\n\n"
                           "stuck_here()\n";
  ChildProcess p({CRUN_BIN, "--nproc-per-node", "4", "--initial-heartbeat-timeout", "2", "--capture-timeout", "4", "--log-dir",
                  (dir.path / "logs").string(), script.string()},
                 {"PYTHON_EXEC=/usr/bin/python3"});
  REQUIRE(p.wait_for_stdout("ready rank=", 4));
  const int before = inotify_instances(p.pid());
  // Stopped, no rank writes its dump: all four are awaited (half the bound: 2 s), until continued.
  for (int rank = 0; rank < 4; ++rank) REQUIRE(::kill(ready_pid(p.out(), rank), SIGSTOP) == 0);
  REQUIRE(p.wait_until([](const std::string&, const std::string& err) { return err.find(" is hung: ") != std::string::npos; },
                       std::chrono::seconds(30)));
  // The capture starts right after that line and waits 2 s: its instances, as /proc shows them.
  int during = before;
  for (int look = 0; look < 400 && during == before; ++look) {
    during = inotify_instances(p.pid());
    if (during == before) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int rank = 0; rank < 4; ++rank) ::kill(ready_pid(p.out(), rank), SIGCONT);
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
  INFO(p.err());
  CHECK(during - before == 1);
  const auto report = read_report(dir.path / "logs");
  for (int rank = 0; rank < 4; ++rank) {
    const auto* s = stacks_of(report, rank);
    REQUIRE(s != nullptr);
    CHECK((*s)["error"] == "");
    CHECK(has_frame((*s)["python_threads"], "stuck_here (hung.py:"));  // continued within the wait
  }
}
