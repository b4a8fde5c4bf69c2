// crun end to end: the real binary, real worker processes, real signals.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "tests/agent/crun_command.h"
#include "tests/support/child_process.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// "ENV rank=R KEY=VALUE" lines -> rank -> key -> value
std::map<int, std::map<std::string, std::string>> parse_env(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> m;
  static const std::regex re(R"(^ENV rank=(\d+) ([A-Z_]+)=(.*)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) m[std::stoi(sm[1])][sm[2]] = sm[3];
  }
  return m;
}

std::vector<int> ready_pids(const std::string& out) {
  std::vector<int> pids;
  static const std::regex re(R"(^ready rank=\d+ pid=(\d+)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) pids.push_back(std::stoi(sm[1]));
  }
  return pids;
}

// "fd rank=R N TARGET" lines -> rank -> descriptor -> target
std::map<int, std::map<int, std::string>> parse_fds(const std::string& out) {
  std::map<int, std::map<int, std::string>> m;
  static const std::regex re(R"(^fd rank=(\d+) (\d+) (.*)$)");
  for (const auto& line : lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) m[std::stoi(sm[1])][std::stoi(sm[2])] = sm[3];
  }
  return m;
}

}  // namespace

TEST_CASE("environment contract for nproc 1-4", "[e2e][env]") {
  for (int n = 1; n <= 4; ++n) {
    SECTION("nproc " + std::to_string(n)) {
      ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", std::to_string(n), "--max-restarts", "3",
                               "--role", "trainer", "--rdzv-id", "job42"},
                              {"--print-env"}));
      REQUIRE(p.wait_exit() == 0);
      const auto env = parse_env(p.out());
      REQUIRE(env.size() == static_cast<std::size_t>(n));
      std::set<std::string> error_files;
      for (int r = 0; r < n; ++r) {
        auto e = env.at(r);
        const std::string rs = std::to_string(r), ns = std::to_string(n);
        CHECK(e["LOCAL_RANK"] == rs);
        CHECK(e["RANK"] == rs);
        CHECK(e["GROUP_RANK"] == "0");
        CHECK(e["GROUP_WORLD_SIZE"] == "1");
        CHECK(e["ROLE_NAME"] == "trainer");
        CHECK(e["ROLE_RANK"] == rs);
        CHECK(e["ROLE_WORLD_SIZE"] == ns);
        CHECK(e["LOCAL_WORLD_SIZE"] == ns);
        CHECK(e["WORLD_SIZE"] == ns);
        CHECK(e["MASTER_ADDR"] == "127.0.0.1");
        CHECK(std::stoi(e["MASTER_PORT"]) > 0);
        CHECK(e["MASTER_PORT"] == env.at(0).at("MASTER_PORT"));
        CHECK(e["TORCHELASTIC_RESTART_COUNT"] == "0");
        CHECK(e["TORCHELASTIC_MAX_RESTARTS"] == "3");
        CHECK(e["TORCHELASTIC_RUN_ID"] == "job42");
        CHECK(e["TORCHELASTIC_USE_AGENT_STORE"] == "False");
        CHECK(e["OMP_NUM_THREADS"] == (n > 1 ? "1" : "<unset>"));  // torchrun: only for nproc > 1
        CHECK(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
        CHECK(e["NCCL_ASYNC_ERROR_HANDLING"] == "1");
        CHECK(e["TORCHELASTIC_ERROR_FILE"].find("attempt_0/" + rs + "/error.json") != std::string::npos);
        error_files.insert(e["TORCHELASTIC_ERROR_FILE"]);
      }
      CHECK(error_files.size() == static_cast<std::size_t>(n));
    }
  }
}

TEST_CASE("the temporary run dir: TMPDIR when set; else a tmpfs unless it holds logs", "[e2e][env]") {
  TempDir tmp, runtime;
  auto error_file = [](const ChildProcess& p) {
    const auto env = parse_env(p.out());
    return env.empty() ? std::string() : env.at(0).at("TORCHELASTIC_ERROR_FILE");
  };
  auto under = [](const std::string& file, const fs::path& dir) { return file.rfind(dir.string() + "/crun-", 0) == 0; };
  SECTION("TMPDIR wins") {
    ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "1"}, {"--print-env"}),
                   {"TMPDIR=" + tmp.path.string(), "XDG_RUNTIME_DIR=" + runtime.path.string()});
    REQUIRE(p.wait_exit() == 0);
    CHECK(under(error_file(p), tmp.path));
  }
  SECTION("no TMPDIR, only small runtime files: XDG_RUNTIME_DIR") {
    ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "1"}, {"--print-env"}),
                   {"TMPDIR=", "XDG_RUNTIME_DIR=" + runtime.path.string()});
    REQUIRE(p.wait_exit() == 0);
    CHECK(under(error_file(p), runtime.path));
    CHECK(fs::is_empty(runtime.path));  // removed at exit
  }
  SECTION("no TMPDIR, no XDG_RUNTIME_DIR: /dev/shm, where it can be written; else /tmp") {
    ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "1"}, {"--print-env"}), {"TMPDIR=", "XDG_RUNTIME_DIR="});
    REQUIRE(p.wait_exit() == 0);
    CHECK(under(error_file(p), ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp"));
  }
  SECTION("redirected logs stay off the tmpfs: /tmp") {
    ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "1", "--redirects", "3"}, {"--print-env"}),
                   {"TMPDIR=", "XDG_RUNTIME_DIR=" + runtime.path.string()});
    REQUIRE(p.wait_exit() == 0);
    const std::string said = p.err();
    INFO(said);
    const std::string lead = "crun: worker logs in ";
    const auto at = said.find(lead + "/tmp/crun-");
    REQUIRE(at != std::string::npos);
    const auto from = at + lead.size();
    const std::string dir = said.substr(from, said.find('\n', from) - from);
    CHECK(fs::exists(fs::path(dir) / "attempt_0" / "0" / "stdout.log"));
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
}

TEST_CASE("PET_* defaults, underscore spelling, user's OMP_NUM_THREADS kept", "[e2e][env]") {
  std::vector<std::string> argv{CRUN_BIN, "--max_restarts=1", "--no-python", CRUN_TEST_WORKER, "--print-env"};
  ChildProcess p(argv, {"PET_NPROC_PER_NODE=3", "OMP_NUM_THREADS=4", "PET_MASTER_PORT=0"});
  REQUIRE(p.wait_exit() == 0);
  const auto env = parse_env(p.out());
  REQUIRE(env.size() == 3);
  CHECK(env.at(2).at("OMP_NUM_THREADS") == "4");
  CHECK(env.at(2).at("TORCHELASTIC_MAX_RESTARTS") == "1");
  CHECK(env.at(2).at("WORLD_SIZE") == "3");
}

TEST_CASE("--virtual-local-rank: LOCAL_RANK 0, each worker its own entry of CUDA_VISIBLE_DEVICES", "[e2e][env]") {
  ChildProcess plain(crun_cmd({"--nproc-per-node", "2"}, {"--print-env"}), {"CUDA_VISIBLE_DEVICES=3,5"});
  REQUIRE(plain.wait_exit() == 0);
  auto env = parse_env(plain.out());
  REQUIRE(env.size() == 2);
  CHECK(env.at(1).at("LOCAL_RANK") == "1");
  CHECK(env.at(1).at("CUDA_VISIBLE_DEVICES") == "3,5");
  ChildProcess virt(crun_cmd({"--nproc-per-node", "2", "--virtual-local-rank"}, {"--print-env"}), {"CUDA_VISIBLE_DEVICES=3,5"});
  REQUIRE(virt.wait_exit() == 0);
  env = parse_env(virt.out());
  REQUIRE(env.size() == 2);
  for (int r = 0; r < 2; ++r) CHECK(env.at(r).at("LOCAL_RANK") == "0");
  CHECK(env.at(0).at("CUDA_VISIBLE_DEVICES") == "3");
  CHECK(env.at(1).at("CUDA_VISIBLE_DEVICES") == "5");
  ChildProcess short_list(crun_cmd({"--nproc-per-node", "3", "--virtual-local-rank"}, {"--print-env"}),
                          {"CUDA_VISIBLE_DEVICES=3,5"});
  REQUIRE(short_list.wait_exit() == 2);
  CHECK(short_list.err() == "crun: error: --virtual-local-rank: local rank 2 has no device in CUDA_VISIBLE_DEVICES=3,5\n");
  CHECK(short_list.out().empty());
}

TEST_CASE("restart counting: failures restart the group until it succeeds", "[e2e][restart]") {
  TempDir tmp;
  const auto stamp = (tmp.path / "stamps").string();
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--max-restarts", "3"},
                          {"--stamp", stamp, "--only-rank", "1", "--fail-before-restart", "2", "--exit", "7"}));
  REQUIRE(p.wait_exit() == 0);
  const std::string stamps = slurp(stamp);
  for (int restart = 0; restart <= 2; ++restart) {
    INFO(stamps);
    CHECK(count(stamps, "start restart=" + std::to_string(restart) + " rank=1 ") == 1);
  }
  CHECK(count(stamps, "start restart=3") == 0);
  CHECK(count(p.err(), "worker failed (root cause): rank 1 ") == 2);
  CHECK(count(p.err(), "restarting the group") == 2);
}

TEST_CASE("restarts exhausted: crun exits with the root cause's code", "[e2e][exitcode]") {
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--max-restarts", "1"}, {"--only-rank", "0", "--exit", "42"}));
  REQUIRE(p.wait_exit() == 42);
  CHECK(count(p.err(), "worker failed (root cause)") == 2);
  CHECK(count(p.err(), "no restarts left") == 1);
}

TEST_CASE("exit-code propagation of signals", "[e2e][exitcode]") {
  SECTION("SIGUSR2") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "1"}, {"--raise", "SIGUSR2"}));
    REQUIRE(p.wait_exit() == 128 + SIGUSR2);
    CHECK(p.err().find("killed by SIGUSR2") != std::string::npos);
  }
  SECTION("SIGKILL") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, {"--only-rank", "1", "--raise", "SIGKILL"}));
    REQUIRE(p.wait_exit() == 128 + SIGKILL);
  }
}

TEST_CASE("root cause: the first failure, with its stderr tail and error file", "[e2e][exitcode]") {
  TempDir logs;
  // Rank 2 fails at once; the other ranks hang until crun's SIGTERM (their trap exits 0).
  ChildProcess p(crun_cmd({"--nproc-per-node", "4", "--log-dir", logs.path.string()},
                          {"--trap", "SIGTERM", "--only-rank", "2", "--stderr-lines", "25", "--error-file",
                           "RuntimeError: boom on rank 2", "--last-words", "no newline here", "--exit", "3",
                           "--hang"}));
  REQUIRE(p.wait_exit() == 3);
  const std::string err = p.err();
  INFO(err);
  CHECK(count(err, "worker failed (root cause)") == 1);
  CHECK(err.find("rank 2 (local rank 2") != std::string::npos);
  CHECK(err.find("exit code 3") != std::string::npos);
  CHECK(err.find("error file: RuntimeError: boom on rank 2") != std::string::npos);
  CHECK(err.find("| no newline here") != std::string::npos);
  CHECK(err.find("| err r=2 i=24") != std::string::npos);
  CHECK(err.find("| err r=2 i=5\n") == std::string::npos);  // only the last 20 lines
  CHECK(err.find("no newline here\n") != std::string::npos);  // passed through, whole
  fs::path report;
  for (const auto& d : fs::directory_iterator(logs.path)) report = d.path() / "failure_report.json";
  const std::string json = slurp(report);
  CHECK(json.find("\"rank\": 2") != std::string::npos);
  CHECK(json.find("RuntimeError: boom on rank 2") != std::string::npos);
}

TEST_CASE("the final root cause's error file becomes crun's own TORCHELASTIC_ERROR_FILE (as torchrun)", "[e2e][exitcode]") {
  TempDir tmp;
  const std::string parent = (tmp.path / "launcher_error.json").string();
  SECTION("the root cause wrote one: copied once restarts are exhausted, errorCode set") {
    // Rank 1 fails in restart 0 (restarting: nothing copied yet) and in restart 1 (copied).
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--max-restarts", "1"},
                            {"--only-rank", "1", "--error-file", "RuntimeError: attempt", "--exit", "3"}),
                   {"TORCHELASTIC_ERROR_FILE=" + parent});
    REQUIRE(p.wait_exit() == 3);
    INFO(p.err());
    CHECK(count(p.err(), "copied the root cause's error file to " + parent) == 1);
    const std::string json = slurp(parent);
    INFO(json);
    CHECK(json.find(R"("message":"RuntimeError: attempt")") != std::string::npos);
    CHECK(json.find(R"("errorCode":3)") != std::string::npos);
    CHECK(json.find(R"("py_callstack":"Traceback...")") != std::string::npos);
  }
  SECTION("the root cause wrote none: the launcher's file is left alone") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, {"--only-rank", "1", "--exit", "3"}),
                   {"TORCHELASTIC_ERROR_FILE=" + parent});
    REQUIRE(p.wait_exit() == 3);
    CHECK_FALSE(fs::exists(parent));
    CHECK(p.err().find("(TORCHELASTIC_ERROR_FILE) left as it is: the worker wrote no error file") != std::string::npos);
  }
}

TEST_CASE("SIGTERM and --signals-to-handle are forwarded; crun exits 128+signal", "[e2e][signals]") {
  SECTION("SIGTERM") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--max-restarts", "3"}, {"--trap", "SIGTERM", "--hang"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 2));
    p.signal(SIGTERM);
    REQUIRE(p.wait_exit() == 128 + SIGTERM);
    CHECK(count(p.out(), "got SIGTERM") == 2);
    CHECK(count(p.err(), "worker failed") == 0);  // a stop, not a failure, and no restart
  }
  SECTION("SIGUSR1 (Slurm's preemption notice) is handled by default: forwarded, no restart") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--max-restarts", "3"}, {"--trap", "SIGUSR1", "--hang"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 2));
    p.signal(SIGUSR1);
    REQUIRE(p.wait_exit() == 128 + SIGUSR1);
    CHECK(count(p.out(), "got SIGUSR1") == 2);
    CHECK(count(p.out(), "ready rank=") == 2);  // the group was not restarted
    CHECK(p.err().find("preemption notice") != std::string::npos);
  }
  SECTION("a worker that does not act on SIGUSR1 is SIGKILLed after --stop-timeout") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "1", "--stop-timeout", "0.3"}, {"--ignore", "SIGUSR1", "--hang"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 1));
    p.signal(SIGUSR1);
    REQUIRE(p.wait_exit() == 128 + SIGUSR1);
    CHECK(p.err().find("sending SIGKILL") != std::string::npos);
    CHECK(count(p.err(), "worker failed") == 0);
  }
  SECTION("SIGINT stays handled when --signals-to-handle names others") {
    ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--signals-to-handle", "SIGUSR1"},
                            {"--trap", "SIGINT", "--hang"}));
    REQUIRE(p.wait_for_stdout("ready rank=", 2));
    p.signal(SIGINT);
    REQUIRE(p.wait_exit() == 128 + SIGINT);
    CHECK(count(p.out(), "got SIGINT") == 2);
  }
}

TEST_CASE("a SIGTERM-ignoring worker is SIGKILLed after the grace period", "[e2e][signals]") {
  // torch's --shutdown-timeout names the same grace period; given after --stop-timeout, it wins.
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--stop-timeout", "30", "--shutdown-timeout", "0.5"}, {"--ignore-term", "--hang"}));
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  const auto pids = ready_pids(p.out());
  REQUIRE(pids.size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGTERM);
  REQUIRE(p.wait_exit() == 128 + SIGTERM);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= std::chrono::milliseconds(450));
  CHECK(took < std::chrono::seconds(10));
  CHECK(p.err().find("sending SIGKILL") != std::string::npos);
  for (int pid : pids) CHECK(wait_pid_gone(pid, 1s));
}

TEST_CASE("a stopped worker is continued so that it acts on the stop signal", "[e2e][signals]") {
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--stop-timeout", "30"}, {"--trap", "SIGTERM", "--hang"}));
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  const auto pids = ready_pids(p.out());
  REQUIRE(pids.size() == 2);
  REQUIRE(::kill(pids[0], SIGSTOP) == 0);  // stopped, or the stop still pending: a SIGCONT undoes either
  p.signal(SIGTERM);
  REQUIRE(p.wait_exit() == 128 + SIGTERM);
  INFO(p.err());
  CHECK(count(p.out(), "got SIGTERM") == 2);  // its handler ran: SIGTERM ended it, not SIGKILL
  CHECK(p.err().find("sending SIGKILL") == std::string::npos);
}

TEST_CASE("agent SIGKILLed: no worker alive 1 s later", "[e2e][signals]") {
  ChildProcess p(crun_cmd({"--nproc-per-node", "3"}, {"--ignore-term", "--hang"}));
  REQUIRE(p.wait_for_stdout("ready rank=", 3));
  const auto pids = ready_pids(p.out());
  REQUIRE(pids.size() == 3);
  p.signal(SIGKILL);
  for (int pid : pids) CHECK(wait_pid_gone(pid, 1s));
  REQUIRE(p.wait_exit() == 128 + SIGKILL);
}

TEST_CASE("4 workers x 10,000 lines arrive whole and prefixed", "[e2e][output]") {
  TempDir logs;
  ChildProcess p(crun_cmd({"--nproc-per-node", "4", "--tee", "3", "--log-dir", logs.path.string()},
                          {"--lines", "10000"}));
  REQUIRE(p.wait_exit() == 0);
  const std::string payload(90, 'x');
  std::map<int, long> next;  // rank -> next expected line number
  long total = 0;
  static const std::regex re(R"(^\[default(\d)\]:line r=(\d) i=(\d+) (x+)$)");
  for (const auto& line : lines(p.out())) {
    std::smatch sm;
    REQUIRE(std::regex_match(line, sm, re));
    const int prefix_rank = std::stoi(sm[1]);
    REQUIRE(prefix_rank == std::stoi(sm[2]));
    REQUIRE(std::stol(sm[3]) == next[prefix_rank]++);
    REQUIRE(sm[4].length() == 90);
    ++total;
  }
  REQUIRE(total == 40000);
  // The log files hold the raw (unprefixed) output.
  for (const auto& d : fs::directory_iterator(logs.path)) {
    const std::string log = slurp(d.path() / "attempt_0" / "3" / "stdout.log");
    CHECK(count(log, "\n") == 10000);
    CHECK(log.find("line r=3 i=9999 ") != std::string::npos);
  }
}

// The workers of agent `agent` (its children running crun_test_worker) that wait in a write to
// their stdout: a console that takes nothing more has stalled them.
int workers_waiting_on_stdout(pid_t agent) {
  int waiting = 0;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(agent) + "/task", ec)) {
    std::istringstream children(slurp(task.path() / "children"));
    for (pid_t pid = 0; children >> pid;) {
      const fs::path proc = "/proc/" + std::to_string(pid);
      if (slurp(proc / "cmdline").find("crun_test_worker") == std::string::npos) continue;
      std::istringstream call(slurp(proc / "syscall"));  // "<nr> <fd> ..." while in a system call
      std::string nr, fd;
      call >> nr >> fd;
      if (nr == std::to_string(SYS_write) && fd == "0x1") ++waiting;
    }
  }
  return waiting;
}

// Each rank's "line r=R i=I xxx" lines numbered 0, 1, ... in order. With `last_may_be_cut`, a
// rank's last line may be any beginning of its next line (a worker killed in the middle of a
// write; one cut before its rank shows belongs to no rank in particular), at most one a rank,
// and nothing of that rank follows it. Returns the whole lines per rank.
std::map<int, long> check_numbered_lines(const std::string& out, bool last_may_be_cut) {
  std::map<int, long> next{{0, 0}, {1, 0}};
  std::set<int> cut;
  int cuts = 0;
  static const std::regex whole(R"(^line r=(\d) i=(\d+) x{90}$)");
  const std::string payload(90, 'x');
  for (const auto& line : lines(out)) {
    INFO("line: " << line);
    std::smatch sm;
    if (std::regex_match(line, sm, whole)) {
      const int rank = std::stoi(sm[1]);
      REQUIRE(cut.count(rank) == 0);
      REQUIRE(std::stol(sm[2]) == next[rank]++);
      continue;
    }
    REQUIRE(last_may_be_cut);
    REQUIRE(++cuts <= static_cast<int>(next.size()));
    const std::string head = "line r=";
    if (line.size() <= head.size() && head.compare(0, line.size(), line) == 0) continue;  // cut before its rank
    int owner = -1;  // the rank whose next line this begins
    for (const auto& [rank, n] : next) {
      const std::string expected = head + std::to_string(rank) + " i=" + std::to_string(n) + " " + payload;
      if (cut.count(rank) == 0 && expected.compare(0, line.size(), line) == 0) owner = rank;
    }
    REQUIRE(owner >= 0);
    cut.insert(owner);
  }
  for (auto it = next.begin(); it != next.end();) it = it->second == 0 ? next.erase(it) : std::next(it);
  return next;
}

TEST_CASE("a console nobody reads stalls the workers, not the agent: SIGTERM is handled at once", "[e2e][output]") {
  // 2 x 4 MB of lines cannot all pass a console that is not read: the agent keeps ~1 MiB, then
  // stops reading, and the workers wait on their pipes.
  ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, {"--lines", "40000"}), {}, SIZE_MAX, /*stdout_held=*/true);
  REQUIRE(eventually([&] { return workers_waiting_on_stdout(p.pid()) == 2; }, 30s));
  p.signal(SIGTERM);
  // A blocked agent would act on it only once the console reads again.
  CHECK(p.wait_until([](const std::string&, const std::string& err) { return err.find("received SIGTERM") != std::string::npos; },
                     10s));
  p.release_stdout();
  const auto code = p.wait_exit();
  REQUIRE(code == 128 + SIGTERM);
  // What the workers wrote before they ended comes out whole and in order.
  const auto counts = check_numbered_lines(p.out(), true);
  CHECK(counts.size() == 2);
}

TEST_CASE("a console that reads again gets every line: 2 x 40,000 lines through a stalled stdout", "[e2e][output]") {
  ChildProcess p(crun_cmd({"--nproc-per-node", "2"}, {"--lines", "40000"}), {}, SIZE_MAX, /*stdout_held=*/true);
  REQUIRE(eventually([&] { return workers_waiting_on_stdout(p.pid()) == 2; }, 30s));
  p.release_stdout();
  REQUIRE(p.wait_exit() == 0);
  const auto counts = check_numbered_lines(p.out(), false);
  CHECK(counts == std::map<int, long>{{0, 40000}, {1, 40000}});
}

TEST_CASE("the harness: a program that cannot be run is an error, not a child exiting 127 unseen", "[e2e][output]") {
  // ChildProcess runs argv[0] as given (execve, no PATH search): the busy load below once ran
  // "timeout" that way, never ran, and its forked copy exited under TSan with a thread-leak report.
  CHECK_THROWS_WITH(ChildProcess({"timeout", "1", "true"}), Catch::Contains("cannot run timeout"));
  ChildProcess ok({"/bin/true"});
  CHECK(ok.wait_exit() == 0);
}

TEST_CASE("stdout and stderr on one pipe (2>&1), busy CPUs: every line whole", "[e2e][output]") {
  // Both cores busy for the test's length: one process each, ending by itself after 60 s at most,
  // SIGKILLed with its ChildProcess (a wrapper such as timeout(1) would leave its child running).
  std::vector<std::unique_ptr<ChildProcess>> busy;
  for (int i = 0; i < 2; ++i) {
    busy.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{"/bin/bash", "-c", "while [ $SECONDS -lt 60 ]; do :; done"}));
  }
  TempDir logs;
  const std::string xs(100, 'x'), ys(60, 'y');
  // Each rank: 10,000 stdout lines, every 20th followed by a stderr line, and last words on stderr.
  const std::string script = "i=0; while [ $i -lt 10000 ]; do echo \"W$LOCAL_RANK $i " + xs +
                             "\"; if [ $((i % 20)) -eq 0 ]; then echo \"E$LOCAL_RANK $i " + ys +
                             "\" >&2; fi; i=$((i+1)); done; echo \"E$LOCAL_RANK last words\" >&2";
  // `crun ... 2>&1 | cat`: one pipe for both streams.
  ChildProcess p({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", CRUN_BIN, "--standalone", "--nproc-per-node", "4", "--tee",
                  "3", "--log-dir", logs.path.string(), "--no-python", "sh", "-c", script});
  REQUIRE(p.wait_exit() == 0);
  std::map<int, int> next_out, next_err;  // rank -> next line number on each stream
  std::set<int> last_words;
  static const std::regex re(R"(^\[default(\d)\]:(?:W(\d) (\d+) (x+)|E(\d) (\d+) (y+)|E(\d) last words)$)");
  for (const auto& line : lines(p.out())) {
    INFO("line: " << line);
    if (line.rfind("crun: ", 0) == 0) {  // the agent's own, on its stderr
      REQUIRE(line.find("[default") == std::string::npos);
      continue;
    }
    std::smatch sm;
    REQUIRE(std::regex_match(line, sm, re));
    const int rank = std::stoi(sm[1]);
    if (sm[2].matched) {
      REQUIRE(std::stoi(sm[2]) == rank);
      REQUIRE(std::stoi(sm[3]) == next_out[rank]++);
      REQUIRE(sm[4].length() == 100);
    } else if (sm[5].matched) {
      REQUIRE(std::stoi(sm[5]) == rank);
      REQUIRE(std::stoi(sm[6]) == next_err[rank]);
      next_err[rank] += 20;
      REQUIRE(sm[7].length() == 60);
    } else {
      REQUIRE(std::stoi(sm[8]) == rank);
      last_words.insert(rank);
    }
  }
  CHECK(next_out == std::map<int, int>{{0, 10000}, {1, 10000}, {2, 10000}, {3, 10000}});
  CHECK(next_err == std::map<int, int>{{0, 10000}, {1, 10000}, {2, 10000}, {3, 10000}});
  CHECK(last_words == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE shapes the teed lines' prefix", "[e2e][output]") {
  TempDir tmp;  // the teed logs' directory, which crun keeps, goes with it
  ChildProcess p(crun_cmd({"--nproc-per-node", "2", "--tee", "1", "--role", "trainer"}, {"--lines", "3"}),
                 {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<${rank}/${local_rank} ${role_name} ${pid}> ",
                  "TMPDIR=" + tmp.path.string()});
  REQUIRE(p.wait_exit() == 0);
  CHECK(count(p.out(), "<0/0 trainer ${pid}> line r=0 i=") == 3);
  CHECK(count(p.out(), "<1/1 trainer ${pid}> line r=1 i=") == 3);
}

TEST_CASE("--redirects and --local-ranks-filter", "[e2e][output]") {
  TempDir logs;
  ChildProcess p(crun_cmd({"--nproc-per-node", "3", "--redirects", "0:1", "--local-ranks-filter", "0,2",
                           "--log-dir", logs.path.string()},
                          {"--lines", "3"}));
  REQUIRE(p.wait_exit() == 0);
  CHECK(count(p.out(), "line r=0 ") == 0);  // redirected to its file only
  CHECK(count(p.out(), "line r=1 ") == 0);  // filtered out of the console
  CHECK(count(p.out(), "line r=2 ") == 3);
  for (const auto& d : fs::directory_iterator(logs.path)) {
    CHECK(count(slurp(d.path() / "attempt_0" / "0" / "stdout.log"), "line r=0 ") == 3);
  }
}

TEST_CASE("two concurrent standalone jobs do not collide", "[e2e][standalone]") {
  ChildProcess a(crun_cmd({"--standalone", "--nproc-per-node", "2"}, {"--print-env", "--bind-master", "--trap", "SIGTERM", "--hang"}));
  ChildProcess b(crun_cmd({"--standalone", "--nproc-per-node", "2"}, {"--print-env", "--bind-master", "--trap", "SIGTERM", "--hang"}));
  REQUIRE(a.wait_for_stdout("ready rank=", 2));
  REQUIRE(b.wait_for_stdout("ready rank=", 2));
  CHECK(count(a.out(), "bound MASTER_PORT") == 1);
  CHECK(count(b.out(), "bound MASTER_PORT") == 1);
  const auto ea = parse_env(a.out());
  const auto eb = parse_env(b.out());
  CHECK(ea.at(0).at("MASTER_PORT") != eb.at(0).at("MASTER_PORT"));
  CHECK(ea.at(0).at("TORCHELASTIC_RUN_ID") != eb.at(0).at("TORCHELASTIC_RUN_ID"));
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  CHECK(a.wait_exit() == 128 + SIGTERM);
  CHECK(b.wait_exit() == 128 + SIGTERM);
}

TEST_CASE("bad flags: one line naming the flag, exit 2, nothing started", "[e2e][cli]") {
  TempDir tmp;
  const auto stamp = (tmp.path / "started").string();
  const auto a_file = (tmp.path / "a-file").string();
  std::ofstream(a_file) << "not a directory\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "zero"}, "--nproc-per-node"},
      {{"--log-dir", a_file}, "--log-dir: " + a_file + " is not a directory"},
      {{"--log-dir", a_file + "/sub"}, "--log-dir: " + a_file + " is not a directory"},
      {{"--rdzv-id=", "--standalone"}, "--rdzv-id: must not be empty"},
      {{"--numa-binding", "node"}, "--numa-binding: no NVIDIA GPU found"},  // none visible, below
      {{"--event-log-handler", "scuba"}, "--event-log-handler"},
      {{"--nproc_per_node", "0"}, "--nproc-per-node"},
      {{"--max-restarts", "-1"}, "--max-restarts"},
      {{"--max-restarts", "x"}, "--max-restarts"},
      {{"--nnodes", "2:4"}, "--nnodes"},
      {{"--nnodes", "2"}, "--node-rank"},
      {{"--nnodes", "2", "--rdzv-backend", "c10d"}, "--rdzv-endpoint"},
      {{"--nnodes", "3:1"}, "--nnodes"},
      {{"--redirects", "7"}, "--redirects"},
      {{"--tee", "0:9"}, "--tee"},
      {{"--signals-to-handle", "SIGKILL"}, "--signals-to-handle"},
      {{"--signals-to-handle", "SIGNOPE"}, "--signals-to-handle"},
      {{"--start-method", "thread"}, "--start-method"},
      {{"--stop-timeout", "-3"}, "--stop-timeout"},
      {{"--local-ranks-filter", "a,b"}, "--local-ranks-filter"},
      {{"--bogus-flag"}, "--bogus-flag"},
      {{"--rdzv-backend", "zookeeper"}, "--rdzv-backend"},
      {{"--rdzv_conf", "timeout"}, "--rdzv-conf"},
      {{"--node-rank", "1"}, "--node-rank"},
      {{"--module"}, "--module"},
  };
  for (const auto& [flags, name] : cases) {
    auto argv = crun_cmd(flags, {"--stamp", stamp});
    ChildProcess p(argv, {"CUDA_VISIBLE_DEVICES="});  // no GPU visible, on any host
    INFO(flags.front());
    REQUIRE(p.wait_exit() == 2);
    CHECK(count(p.err(), "\n") == 1);
    CHECK(p.err().find(name) != std::string::npos);
    CHECK_FALSE(fs::exists(stamp));
  }
  SECTION("missing program") {
    ChildProcess p({CRUN_BIN, "--no-python", "/no/such/program"});
    REQUIRE(p.wait_exit() == 2);
    CHECK(p.err().find("/no/such/program") != std::string::npos);
  }
  SECTION("missing script") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "2", "/no/such/train.py"}, {"PYTHON_EXEC=/bin/sh"});
    REQUIRE(p.wait_exit() == 2);
    CHECK(p.err().find("/no/such/train.py") != std::string::npos);
  }
  SECTION("no program") {
    ChildProcess p({CRUN_BIN, "--nproc-per-node", "2"});
    REQUIRE(p.wait_exit() == 2);
  }
}

TEST_CASE("--version and a .py program runs under PYTHON_EXEC -u", "[e2e][cli]") {
  ChildProcess v({CRUN_BIN, "--version"});
  REQUIRE(v.wait_exit() == 0);
  CHECK(v.out().rfind("crun ", 0) == 0);
  TempDir tmp;
  const auto script = tmp.path / "prog.py";
  std::ofstream(script) << "echo \"args: $0 $*\"\n";
  // /bin/sh stands in for Python: crun runs `$PYTHON_EXEC -u prog.py a b`; sh treats -u as an option.
  ChildProcess p({CRUN_BIN, script.string(), "a", "b"}, {"PYTHON_EXEC=/bin/sh"});
  REQUIRE(p.wait_exit() == 0);
  CHECK(p.out().find("args: " + script.string() + " a b") != std::string::npos);
}

TEST_CASE("an agent that speaks no TLS never loads libssl or libcrypto", "[e2e][cli]") {
  // They are opened on demand (rendezvous/tls_library.h); loading them would cost every start 1.1-1.6 ms.
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "1"}, {"--agent-libraries"}));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.out());
  CHECK(p.out().find(" " CRUN_BIN "\n") != std::string::npos);  // the worker did read the agent's mappings
  CHECK(p.out().find("libssl") == std::string::npos);
  CHECK(p.out().find("libcrypto") == std::string::npos);
}

TEST_CASE("a job whose etcd speaks https: crun loads libssl itself; an etcd it cannot reach, one line and exit 7",
          "[e2e][cli]") {
  ChildProcess p({CRUN_BIN, "--nnodes", "1", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "127.0.0.1:1",
                  "--rdzv-conf", "protocol=https,join_timeout=5", "--nproc-per-node", "1", "/bin/true"});
  const auto code = p.wait_exit(std::chrono::seconds(30));
  INFO(p.err());
  CHECK(code == 7);
  CHECK(p.err().find("etcd unreachable at 127.0.0.1:1") != std::string::npos);
}

TEST_CASE("workers inherit only stdin, stdout and stderr", "[e2e][fds]") {
  // A descriptor crun's own parent leaves open without close-on-exec must not reach the workers either.
  int leaked[2];
  REQUIRE(::pipe(leaked) == 0);
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2"}, {"--list-fds"}));
  ::close(leaked[0]);
  ::close(leaked[1]);
  REQUIRE(p.wait_exit() == 0);
  const auto fds = parse_fds(p.out());
  INFO(p.out());
  REQUIRE(fds.size() == 2);
  for (const auto& [rank, open] : fds) {
    std::set<int> numbers;
    for (const auto& [fd, target] : open) numbers.insert(fd);
    CHECK(numbers == std::set<int>{0, 1, 2});
    CHECK(open.at(0) == "/dev/null");
  }
}

TEST_CASE("an agent that cannot start leaves no run directory behind", "[e2e][cli]") {
  // The store's port is taken: the store host cannot listen, after the run directory was made.
  const int busy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(busy, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::listen(busy, 1) == 0);
  REQUIRE(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  TempDir tmp;
  // is_host=1: this agent must host (one whose hosting is only inferred would join the listener).
  const std::vector<std::string> flags{"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                                       "--rdzv-conf", "is_host=1"};
  SECTION("the temporary run directory (no --log-dir)") {
    ChildProcess p(crun_cmd(flags, {}), {"TMPDIR=" + tmp.path.string()});
    REQUIRE(p.wait_exit() == 3);
    CHECK(p.err().find("cannot start the agent") != std::string::npos);
  }
  SECTION("the run directory under --log-dir") {
    auto with_logs = flags;
    with_logs.insert(with_logs.end(), {"--log-dir", tmp.path.string()});
    ChildProcess p(crun_cmd(with_logs, {}));
    REQUIRE(p.wait_exit() == 3);
    CHECK(p.err().find("cannot start the agent") != std::string::npos);
  }
  CHECK(fs::is_empty(tmp.path));
  ::close(busy);
}

TEST_CASE("crun without crun-keeper beside it: one line naming it, exit 3, nothing started", "[e2e][cli]") {
  TempDir bin, tmp;
  const fs::path crun = bin.path / "crun";
  std::error_code ec;
  fs::create_hard_link(CRUN_BIN, crun, ec);
  if (ec) fs::copy_file(CRUN_BIN, crun);  // another file system
  std::vector<std::string> argv = crun_cmd({"--standalone", "--nproc-per-node", "1"}, {"--print-env"});
  argv[0] = crun.string();
  ChildProcess p(argv, {"TMPDIR=" + tmp.path.string()});
  REQUIRE(p.wait_exit() == 3);
  INFO(p.err());
  CHECK(p.err().find("crun: cannot start the agent: cannot run the keeper " + (bin.path / "crun-keeper").string()) == 0);
  CHECK(count(p.err(), "\n") == 1);
  CHECK(p.out().empty());  // no worker
  CHECK(fs::is_empty(tmp.path));  // no run directory left
}

// "127.0.0.1:<port>" with a port free now.
std::string free_loopback_endpoint() {
  const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(probe);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

TEST_CASE("several agents on one host with one endpoint and no is_host: the first to listen hosts, the others join",
          "[e2e][shared_endpoint]") {
  // torch's c10d joins as a client when the port is taken; crun did too little (all but one died
  // with "Address already in use") before.
  const std::string endpoint = free_loopback_endpoint();
  constexpr int kAgents = 8;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < kAgents; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(crun_cmd(
        {"--nnodes", std::to_string(kAgents), "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         endpoint, "--rdzv-id", "shared"},
        {"--print-env"})));
  }
  int hosting = 0;
  std::set<std::string> ranks;
  for (auto& p : agents) {
    const auto ended = p->wait_exit();
    INFO(p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    hosting += p->err().find("hosting the rendezvous") != std::string::npos ? 1 : 0;
    const auto at = p->out().find(" RANK=");
    if (at != std::string::npos) ranks.insert(p->out().substr(at + 6, p->out().find('\n', at) - at - 6));
  }
  CHECK(hosting == 1);
  CHECK(ranks.size() == kAgents);
}

// What `crun store` prints for `args` against `endpoint` (one-shot client), "" on failure.
std::string store_command(const std::string& endpoint, const std::vector<std::string>& args) {
  std::vector<std::string> argv{CRUN_BIN, "store", "--endpoint", endpoint};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess c(argv);
  return c.wait_exit(30s) == 0 ? c.out() : std::string();
}

// TSan's runtime starts a background thread of its own at a process's first pthread_create.
#if defined(__SANITIZE_THREAD__)
constexpr int kRuntimeThreads = 1;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kRuntimeThreads = 1;
#else
constexpr int kRuntimeThreads = 0;
#endif
#else
constexpr int kRuntimeThreads = 0;
#endif

int thread_count(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec); !ec && it != fs::directory_iterator(); ++it) {
    std::ifstream comm(it->path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "crun-replica") ++n;  // state replication's own thread (agent/state_replication.h)
  }
  return n;
}

TEST_CASE("an agent that joins a store on its own host runs the rendezvous on its loop: one thread, heartbeats going",
          "[e2e][shared_endpoint]") {
  const std::string endpoint = free_loopback_endpoint();
  auto agent = [&] {
    return std::make_unique<ChildProcess>(crun_cmd({"--nnodes", "3", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                                    "--rdzv-endpoint", endpoint, "--rdzv-id", "onloop", "--rdzv-conf",
                                                    "keep_alive_interval=0.1,heartbeat_timeout=2"},
                                                   {"--print-env"}));
  };
  auto host = agent();
  REQUIRE(host->wait_until([](const std::string&, const std::string& err) { return err.find("hosting the rendezvous") != std::string::npos; }, 30s));
  auto joiner = agent();
  // The joiner's heartbeat key, once there, counts its beats: sent from its loop's timer.
  std::string key;
  REQUIRE(eventually([&] {
    key = store_command(endpoint, {"keys", "crun/rdzv/onloop/hb/"});
    const std::string mine = ":" + std::to_string(joiner->pid()) + ":";
    for (const auto& k : lines(key)) {
      if (k.find(mine) != std::string::npos) {
        key = k;
        return true;
      }
    }
    return false;
  }, 30s));
  REQUIRE(eventually([&] {
    const std::string beats = store_command(endpoint, {"get", key});
    return !beats.empty() && std::stol(beats) >= 10;  // 1 s of beats, half the heartbeat timeout
  }, 30s));
  // Its loop only (besides state replication's and a sanitizer runtime's): no I/O thread of the participant's.
  CHECK(thread_count(joiner->pid()) == 1 + kRuntimeThreads);
  CHECK(thread_count(host->pid()) > 1);     // the host's store and coordinator have theirs
  auto third = agent();
  for (auto* p : {host.get(), joiner.get(), third.get()}) {
    const auto ended = p->wait_exit();
    INFO(p->err() << "\n" << exit_text(ended));
    CHECK(ended == 0);
  }
}

TEST_CASE("an endpoint port of this host held by a socket that does not listen: one line and exit 3, not a wait",
          "[e2e][shared_endpoint]") {
  // The port is an outgoing connection's local port: the agents (no is_host) cannot listen there
  // and nobody answers there. Before, each joined "whoever held it" and retried a refused connect
  // until its join timeout, without a word.
  auto loopback_socket = [](sockaddr_in& addr) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    addr = sockaddr_in{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    return fd;
  };
  sockaddr_in server_addr{}, held{};
  const int server = loopback_socket(server_addr);
  REQUIRE(::listen(server, 1) == 0);
  const int holder = loopback_socket(held);
  REQUIRE(::connect(holder, reinterpret_cast<sockaddr*>(&server_addr), sizeof(server_addr)) == 0);
  const std::string port = std::to_string(ntohs(held.sin_port));
  std::vector<std::unique_ptr<ChildProcess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<ChildProcess>(crun_cmd(
        {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port,
         "--rdzv-id", "held", "--rdzv-conf", "join_timeout=600"},
        {"--print-env"})));
  }
  for (auto& p : agents) {
    const auto ended = p->wait_exit(60s);  // far below the join timeout the old behaviour waited out
    INFO(p->err() << "\n" << exit_text(ended));
    CHECK(ended == 3);
    CHECK(p->err().find("port 127.0.0.1:" + port + " is in use on this host, but nothing listens there") !=
          std::string::npos);
    CHECK(p->out().find("RANK=") == std::string::npos);
  }
  ::close(holder);
  ::close(server);
}

TEST_CASE("a worker's argv[0] is the program as written, not its resolved path", "[e2e][cli]") {
  // torchrun execs [script, args...] as given: programs that read their own name, and pgrep -x,
  // see "sh", not "/usr/bin/sh".
  ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "1", "sh", "-c", "echo argv0=$0"});
  REQUIRE(p.wait_exit() == 0);
  CHECK(p.out().find("argv0=sh\n") != std::string::npos);
}

TEST_CASE("--rdzv-endpoint localhost:0 with one node: jobs stacked on free ports", "[e2e][shared_endpoint]") {
  // torchrun's documented way to run several single-node jobs on one host without picking ports.
  std::vector<std::unique_ptr<ChildProcess>> jobs;
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(std::make_unique<ChildProcess>(crun_cmd(
        {"--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"},
        {"--print-env"})));
  }
  for (auto& p : jobs) {
    REQUIRE(p->wait_exit() == 0);
    INFO(p->err());
    CHECK(p->err().find("hosting the rendezvous at localhost:0") == std::string::npos);  // the real port is shown
    CHECK(p->out().find(" WORLD_SIZE=2") != std::string::npos);
  }
}

TEST_CASE("every descriptor the agent opens is close-on-exec", "[e2e][fds]") {
  // Asio's epoll, eventfd, timerfd and signal pipe, the store's sockets, pipes, pidfds, the
  // cgroup and keeper descriptors: none may lack O_CLOEXEC. What crun inherited from this test
  // (at the same numbers) is not crun's to mark.
  const auto inherited = fds_without_cloexec(::getpid());
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2"}, {"--hang"}));
  REQUIRE(p.wait_for_stdout("ready rank=", 2));
  auto own = fds_without_cloexec(p.pid());
  for (int fd = 0; fd <= 2; ++fd) own.erase(fd);
  for (const auto& [fd, target] : inherited) own.erase(fd);
  for (const auto& [fd, target] : own) UNSCOPED_INFO("fd " << fd << " -> " << target);
  CHECK(own.empty());
  p.signal(SIGTERM);
  CHECK(p.wait_exit() == 128 + SIGTERM);
}

namespace {

// A standalone crun running `script` under sh, one worker, with torch's file timer on.
std::vector<std::string> timer_job(const std::string& script) {
  return {CRUN_BIN, "--standalone", "--nproc-per-node", "1", "--no-python", "/bin/sh", "-c", script};
}

}  // namespace

TEST_CASE("file timer: an overdue scope is killed with its signal and named in the report", "[e2e][file_timer]") {
  TempDir tmp;
  // The worker is the shell itself ($$, written $$$$: crun reads "$$" in the arguments as "$", as
  // torchrun): it opens a scope that ends 0.5 s from now and sleeps.
  const double deadline =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + 0.5;
  const std::string script = "echo \"{\\\"version\\\": 1, \\\"pid\\\": $$$$, \\\"scope_id\\\": \\\"load\\\", "
                             "\\\"expiration_time\\\": " + std::to_string(deadline) +
                             ", \\\"signal\\\": 9}\" > \"$TORCHELASTIC_TIMER_FILE\"; echo opened; exec sleep 60";
  ChildProcess p(timer_job(script), {"TMPDIR=" + tmp.path.string(), "TORCHELASTIC_ENABLE_FILE_TIMER=1"});
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
  INFO(p.err());
  CHECK(p.out().find("opened") != std::string::npos);
  CHECK(std::regex_search(p.err(), std::regex(R"(file timer scope 'load' of local rank 0 \(pid \d+\) ran \d+ ms past its deadline; sent SIGKILL)")));
  CHECK(std::regex_search(p.err(), std::regex(R"(killed by SIGKILL.*no restarts left\ncrun:   watchdog: file timer scope 'load')")));
  // Its stacks first (docs/operations.md, "Stacks before the kill"), then the scope's signal.
  const auto took = p.err().find("crun: took the stacks of 1 local worker(s)");
  CHECK(took < p.err().find("file timer scope 'load' of local rank 0"));
  CHECK(p.err().find("crun: rank 0 (local rank 0) was in ") != std::string::npos);
  CHECK(fs::is_empty(tmp.path));  // the FIFO went with the run dir
}

TEST_CASE("file timer: the FIFO is exported, bad requests are ignored with a line each", "[e2e][file_timer]") {
  TempDir tmp;
  const std::string fifo = (tmp.path / "timer.fifo").string();
  const std::string script =
      "test -p \"$TORCHELASTIC_TIMER_FILE\" && echo \"fifo=$TORCHELASTIC_TIMER_FILE\"; "
      "echo 'not json' > \"$TORCHELASTIC_TIMER_FILE\"; "
      "echo '{\"version\": 1, \"pid\": 1, \"scope_id\": \"x\", \"expiration_time\": 1, \"signal\": 9}' > \"$TORCHELASTIC_TIMER_FILE\"; "
      "echo '{\"pid\": \"me\"}' > \"$TORCHELASTIC_TIMER_FILE\"";
  ChildProcess p(timer_job(script), {"TORCHELASTIC_ENABLE_FILE_TIMER=1", "TORCHELASTIC_TIMER_FILE=" + fifo});
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 0);
  INFO(p.err());
  CHECK(p.out().find("fifo=" + fifo) != std::string::npos);
  CHECK(p.err().find("file timer: ignored a malformed request: the timer request is not JSON") != std::string::npos);
  CHECK(p.err().find("ignored a request from pid 1, which is not one of this job's workers") != std::string::npos);
  CHECK(p.err().find("\"pid\" is not an integer") != std::string::npos);
  CHECK_FALSE(fs::exists(fifo));  // removed when the agent ends
}

TEST_CASE("file timer: a pipe that cannot be made stops the agent before any worker", "[e2e][file_timer]") {
  TempDir tmp;
  ChildProcess p(timer_job("echo started"), {"TMPDIR=" + tmp.path.string(), "TORCHELASTIC_ENABLE_FILE_TIMER=1",
                                             "TORCHELASTIC_TIMER_FILE=/nonexistent-crun-dir/timer"});
  REQUIRE(p.wait_exit() == 3);
  CHECK(p.err().find("crun: cannot start the agent: the file timer's pipe /nonexistent-crun-dir/timer: cannot create it") !=
        std::string::npos);
  CHECK(p.out().find("started") == std::string::npos);
  CHECK(fs::is_empty(tmp.path));
}

namespace {

// A standalone crun running a Python worker (the heartbeat file written as documented in
// base/heartbeat_file.h, no library) with `flags`.
std::vector<std::string> python_job(const std::vector<std::string>& flags, const std::string& body) {
  std::vector<std::string> argv{CRUN_BIN, "--standalone", "--nproc-per-node", "1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--no-python", "/usr/bin/python3", "-c",
                           "import mmap, os, struct, time\n"
                           "hb = mmap.mmap(os.open(os.environ['CRUN_HEARTBEAT_FILE'], os.O_RDWR), 16)\n" +
                               body});
  return argv;
}

}  // namespace

TEST_CASE("heartbeats: a Python worker that falls silent is hung, named with its last step", "[e2e][hang]") {
  ChildProcess p(python_job({"--heartbeat-timeout", "1"},
                            "for step in range(5):\n"
                            "    hb[:] = struct.pack('=qq', step, time.monotonic_ns())\n"
                            "print('silent', flush=True)\n"
                            "time.sleep(60)\n"));
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
  INFO(p.err());
  CHECK(p.out().find("silent") != std::string::npos);
  CHECK(std::regex_search(p.err(), std::regex(R"(local rank 0 \(pid \d+\) is hung: no heartbeat for 1\.\d s, last at step 4; state S \(sleeping\))")));
  CHECK(p.err().find("crun:   watchdog: local rank 0") != std::string::npos);
}

TEST_CASE("heartbeats: no first beat within --initial-heartbeat-timeout is a hang; beating keeps a worker alive",
          "[e2e][hang]") {
  SECTION("never beats") {
    ChildProcess p(python_job({"--initial-heartbeat-timeout", "1", "--heartbeat-timeout", "30"}, "time.sleep(60)\n"));
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 137);
    INFO(p.err());
    CHECK(std::regex_search(p.err(), std::regex(R"(is hung: no first heartbeat 1\.\d s after it started)")));
  }
  SECTION("beats every 0.2 s for 2.5 s under a 1 s timeout") {
    ChildProcess p(python_job({"--initial-heartbeat-timeout", "1", "--heartbeat-timeout", "1"},
                              "for step in range(13):\n"
                              "    hb[:] = struct.pack('=qq', step, time.monotonic_ns())\n"
                              "    time.sleep(0.2)\n"));
    REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 0);
    CHECK(p.err().find("hung") == std::string::npos);
  }
}

TEST_CASE("heartbeats: restarts that make no progress end the job with exit 8", "[e2e][hang]") {
  // Every attempt beats up to step 5 and fails: attempt 0 is progress, attempts 1-3 are not.
  ChildProcess p(python_job({"--heartbeat-timeout", "30", "--max-restarts", "10", "--max-no-progress-restarts", "3"},
                            "for step in range(6):\n"
                            "    hb[:] = struct.pack('=qq', step, time.monotonic_ns())\n"
                            "print('attempt', os.environ['TORCHELASTIC_RESTART_COUNT'], flush=True)\n"
                            "raise SystemExit(1)\n"));
  REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 8);
  INFO(p.out() + p.err());
  CHECK(p.out().find("attempt 3") != std::string::npos);
  CHECK(p.out().find("attempt 4") == std::string::npos);
  CHECK(std::regex_search(p.err(), std::regex(R"(exit code 1, at .*attempt 3; stopping: the restarts make no progress)")));
}

TEST_CASE("a worker SIGKILL cannot end is left behind: stopping stays bounded", "[e2e][signals]") {
  // Both workers ignore SIGTERM; local rank 1 is also held at its exit by a tracer, so the SIGKILL
  // after --stop-timeout leaves it stopped and unreaped (as uninterruptible sleep would).
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--stop-timeout", "1"},
                          {"--unkillable-rank", "1", "--ignore-term", "--hang"}));
  REQUIRE(p.wait_for_stdout("ready rank=1 "));
  std::smatch m;
  const std::string out = p.out();
  REQUIRE(std::regex_search(out, m, std::regex(R"(unkillable rank=1 pid=(\d+) tracer=(\d+))")));
  const int worker = std::stoi(m[1]), tracer = std::stoi(m[2]);
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGTERM);
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 128 + SIGTERM);
  INFO(p.err());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // 1 s grace, 1 s more after SIGKILL
  CHECK(std::regex_search(p.err(), std::regex("local rank 1 \\(pid " + std::to_string(worker) +
                                              "\\) is still there 1\\.0 s after SIGKILL: state t \\(stopped by a tracer\\)[^\\n]*; left behind")));
  CHECK(p.err().find("local rank 0 (pid") == std::string::npos);  // SIGKILL ended rank 0
  // Nothing outlives crun: the tracer goes with the rest of the tree, which frees the worker.
  CHECK(wait_pid_gone(tracer, std::chrono::seconds(10)));
  CHECK(wait_pid_gone(worker, std::chrono::seconds(10)));
}

TEST_CASE("the attempt after a worker was left behind gets a MASTER_PORT the stuck worker does not hold",
          "[e2e][signals]") {
  // Attempt 0: rank 0 listens on MASTER_PORT and is held at its exit by a tracer; rank 1 fails. After
  // SIGKILL and the second grace rank 0 is left behind, still holding its port; attempt 1's rank 0
  // must be able to listen on its own MASTER_PORT (it exits 5 if it cannot). Rank 1 fails only on
  // SIGUSR1, sent once rank 0 has bound its port and is held: without that order rank 1 could fail
  // (and rank 0 be killed) before rank 0 got there (a loaded ASan run once saw it).
  ChildProcess p(crun_cmd({"--standalone", "--nproc-per-node", "2", "--stop-timeout", "1", "--max-restarts", "1"},
                          {"--bind-master", "--unkillable-rank", "0", "--ignore-term", "--hang", "--hang-before-restart",
                           "1", "--only-rank", "1", "--fail-before-restart", "1", "--fail-on-signal", "SIGUSR1", "--exit",
                           "3"}));
  REQUIRE(p.wait_for_stdout("unkillable rank=0 "));
  REQUIRE(p.wait_for_stdout("ready rank=1 "));
  int rank1 = -1;
  for (const auto& line : lines(p.out())) {
    if (std::sscanf(line.c_str(), "ready rank=1 pid=%d", &rank1) == 1) break;
  }
  REQUIRE(rank1 > 0);
  REQUIRE(::kill(rank1, SIGUSR1) == 0);
  REQUIRE(p.wait_exit(std::chrono::seconds(30)) == 0);
  INFO(p.out() + p.err());
  std::vector<std::string> ports;
  static const std::regex bound(R"(^rank 0 bound MASTER_PORT=(\d+)$)");
  for (const auto& line : lines(p.out())) {
    std::smatch m;
    if (std::regex_match(line, m, bound)) ports.push_back(m[1]);
  }
  REQUIRE(ports.size() == 2);
  CHECK(ports[0] != ports[1]);
  CHECK(p.err().find("local rank 0 (pid ") != std::string::npos);
  CHECK(p.err().find("left behind") != std::string::npos);
}
