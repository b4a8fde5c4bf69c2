// agent/worker_launch: each worker's launch computed from the agent's settings and the round,
// and agent/run_directory: where the run directory goes and its layout.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "agent/run_directory.h"
#include "agent/worker_launch.h"
#include "tests/support/env_map.h"

using namespace crun;

namespace {

std::filesystem::path fresh_base() {
  std::string t = "/tmp/crun-launch-test-XXXXXX";
  REQUIRE(::mkdtemp(t.data()) != nullptr);
  return t;
}

// A run directory at a known path, made for real under a fresh temporary base.
struct RunDirFixture {
  std::filesystem::path base = fresh_base();
  RunDirectory dir = RunDirectory::make("", base.string(), "job/1", false);
  ~RunDirFixture() { std::filesystem::remove_all(base); }
};

AgentConfig three_workers() {
  AgentConfig c;
  c.worker_program = "/usr/bin/python3";
  c.worker_argv = {"python3", "-u", "train.py", "--out=ckpt_${local_rank}", "$HOME"};
  c.nproc_per_node = 3;
  c.max_restarts = 2;
  c.role = "trainer";
  c.run_id = "job/1";
  return c;
}

GroupStart second_start() {
  GroupStart s;
  s.restart_count = 1;
  s.round.rank_offset = 6;
  s.round.world_size = 9;
  s.round.master_addr = "10.0.0.5";
  s.round.master_port = 29500;
  s.round.restart_count = 1;
  s.base_env = {"PATH=/bin", "HOME=/home/u", "LOCAL_RANK=7"};
  s.agent_id = "123-abc";
  return s;
}

}  // namespace

TEST_CASE("a worker's launch: argv with its local rank, its environment, its files", "[worker_launch]") {
  RunDirFixture f;
  const auto p = plan_worker_launch(three_workers(), f.dir, second_start(), 2);
  CHECK(p.local_rank == 2);
  CHECK(p.program == "/usr/bin/python3");
  CHECK(p.argv == std::vector<std::string>{"python3", "-u", "train.py", "--out=ckpt_2", "$HOME"});
  CHECK(p.dir == f.dir.path() / "attempt_1" / "2");
  CHECK(p.error_file == (f.dir.path() / "attempt_1" / "2" / "error.json").string());
  CHECK(p.heartbeat_file.empty());
  CHECK(p.cpus.empty());
  auto env = crun::test::env_map(p.env);
  CHECK(env["PATH"] == "/bin");          // the agent's environment passes through
  CHECK(env["LOCAL_RANK"] == "2");       // torchrun's contract replaces its own names
  CHECK(env["RANK"] == "8");             // rank offset 6 + local rank 2
  CHECK(env["WORLD_SIZE"] == "9");
  CHECK(env["MASTER_ADDR"] == "10.0.0.5");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "job/1");
  CHECK(env["ROLE_NAME"] == "trainer");
  CHECK(env["TORCHELASTIC_ERROR_FILE"] == p.error_file);
  CHECK(env["CRUN_AGENT_ID"] == "123-abc");
  CHECK(env.count("CRUN_HEARTBEAT_FILE") == 0);
  CHECK(env.count("TORCHELASTIC_TIMER_FILE") == 0);
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 0);
  // Nothing was made: the plan only names the files.
  CHECK_FALSE(std::filesystem::exists(p.dir));
}

TEST_CASE("a worker's launch: watchdog files, its device and its CPUs", "[worker_launch]") {
  RunDirFixture f;
  AgentConfig c = three_workers();
  c.visible_devices = {"0", "1", "2"};
  c.worker_cpus = {{0, 1}, {2, 3}, {4, 5}};
  GroupStart s = second_start();
  s.heartbeats = true;
  s.timer_file = "/run/timer.fifo";
  const auto p = plan_worker_launch(c, f.dir, s, 1);
  CHECK(p.heartbeat_file == (f.dir.path() / "attempt_1" / "1" / "heartbeat").string());
  CHECK(p.cpus == std::vector<int>{2, 3});
  auto env = crun::test::env_map(p.env);
  CHECK(env["CRUN_HEARTBEAT_FILE"] == p.heartbeat_file);
  CHECK(env["TORCHELASTIC_TIMER_FILE"] == "/run/timer.fifo");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "1");
  CHECK(env["LOCAL_RANK"] == "0");  // --virtual-local-rank: each worker sees one device as its 0
  CHECK(env["RANK"] == "7");
  CHECK(env.count("CRUN_STATE_DIR") == 0);  // no state root given
  s.state_root = "/dev/shm/crun-state-job_1-42";
  CHECK(crun::test::env_map(plan_worker_launch(c, f.dir, s, 1).env)["CRUN_STATE_DIR"] ==
        "/dev/shm/crun-state-job_1-42/rank-7");  // the global rank's directory
}

TEST_CASE("a worker's streams: console, --redirects, --tee, --local-ranks-filter", "[worker_launch]") {
  RunDirFixture f;
  AgentConfig c = three_workers();
  c.redirects = {0, 2, 0};  // rank 1: stderr to its file only
  c.tee = {1, 0, 3};        // rank 0: stdout tee'd; rank 2: both
  c.console = {true, true, false};
  c.log_line_prefix_template = "${rank}|";
  const GroupStart s = second_start();

  const auto r0 = plan_worker_launch(c, f.dir, s, 0);
  CHECK(r0.out.file == (r0.dir / "stdout.log").string());
  CHECK(r0.out.console);
  CHECK(r0.out.console_prefix == "6|");
  CHECK(r0.out.duplicate);
  CHECK(r0.err.file.empty());  // not tee'd: the console alone, unprefixed
  CHECK(r0.err.console);
  CHECK(r0.err.console_prefix.empty());
  CHECK_FALSE(r0.err.duplicate);

  const auto r1 = plan_worker_launch(c, f.dir, s, 1);
  CHECK(r1.out.file.empty());
  CHECK(r1.out.console);
  CHECK(r1.err.file == (r1.dir / "stderr.log").string());
  CHECK_FALSE(r1.err.console);

  const auto r2 = plan_worker_launch(c, f.dir, s, 2);  // filtered out: files only
  CHECK(r2.out.file == (r2.dir / "stdout.log").string());
  CHECK(r2.err.file == (r2.dir / "stderr.log").string());
  CHECK_FALSE(r2.out.console);
  CHECK_FALSE(r2.err.console);
  CHECK_FALSE(r2.out.duplicate);

  AgentConfig plain = three_workers();  // per-rank vectors left empty: everything on the console
  const auto p = plan_worker_launch(plain, f.dir, s, 2);
  CHECK(p.out.console);
  CHECK(p.err.console);
  CHECK(p.out.file.empty());
}

TEST_CASE("the run directory: a temporary one's place, name and removal; a log dir's is kept", "[run_directory]") {
  const auto none = [](const std::string&) { return false; };
  const auto all = [](const std::string&) { return true; };
  const auto shm_only = [](const std::string& d) { return d == "/dev/shm"; };
  CHECK(temporary_run_base("/scratch", "/run/user/7", false, all).dir == "/scratch");
  CHECK(temporary_run_base("/scratch", std::nullopt, false, all).why == "TMPDIR");
  CHECK(temporary_run_base(std::nullopt, "/run/user/7", false, all).why == "XDG_RUNTIME_DIR");
  CHECK(temporary_run_base(std::nullopt, "relative", false, shm_only).dir == "/dev/shm");
  CHECK(temporary_run_base(std::nullopt, "/run/user/7", false, shm_only).dir == "/dev/shm");
  CHECK(temporary_run_base(std::nullopt, "/run/user/7", true, all).dir == "/tmp");  // logs: not in memory
  CHECK(temporary_run_base(std::nullopt, "/run/user/7", false, none).dir == "/tmp");
  CHECK(keeps_worker_logs({0, 0}, {0, 2}));
  CHECK_FALSE(keeps_worker_logs({0, 0}, {}));

  RunDirFixture f;
  CHECK(f.dir.temporary());
  CHECK(f.dir.path().parent_path() == f.base);
  CHECK(f.dir.path().filename().string().rfind("crun-job_1-", 0) == 0);  // a run id is not a path
  CHECK(std::filesystem::is_directory(f.dir.path()));
  CHECK(f.dir.report_file() == f.dir.path() / "failure_report.json");
  CHECK(f.dir.attempt_file(3, "filtered_stdout.log") == f.dir.path() / "attempt_3" / "filtered_stdout.log");
  std::filesystem::create_directories(f.dir.attempt_dir(0, 0));
  f.dir.remove();
  CHECK_FALSE(std::filesystem::exists(f.dir.path()));

  const RunDirectory with_logs = RunDirectory::make("", f.base.string(), "job", true);
  CHECK_FALSE(with_logs.temporary());  // it holds the logs: kept
  const RunDirectory logs = RunDirectory::make((f.base / "logs").string(), "/nonexistent", "job", false);
  CHECK_FALSE(logs.temporary());
  CHECK(logs.path().parent_path() == f.base / "logs");
  CHECK(logs.path().filename().string().rfind("job_", 0) == 0);
  CHECK_THROWS_AS(RunDirectory::make("", "/proc/no-such-dir", "job", false), std::exception);
}
