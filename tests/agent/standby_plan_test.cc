// agent/standby_plan: which local rank gets a standby and when, what it is started with (the
// per-round variables left out), and the message that makes it a start's worker.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/run_directory.h"
#include "agent/standby_bootstrap.h"
#include "agent/standby_plan.h"
#include "tests/support/env_map.h"

using namespace crun;

namespace {

std::filesystem::path fresh_base() {
  std::string t = "/tmp/crun-standby-plan-test-XXXXXX";
  REQUIRE(::mkdtemp(t.data()) != nullptr);
  return t;
}

struct RunDirFixture {
  std::filesystem::path base = fresh_base();
  RunDirectory dir = RunDirectory::make("", base.string(), "job/1", false);
  ~RunDirFixture() { std::filesystem::remove_all(base); }
};

AgentConfig python_job() {
  AgentConfig c;
  c.worker_program = "/usr/bin/python3";
  c.worker_argv = {"python3", "-u", "train.py", "--out=ckpt_${local_rank}"};
  c.nproc_per_node = 2;
  c.max_restarts = 2;
  c.standby_workers = true;
  c.standby_preload = {"torch", "numpy.linalg"};
  return c;
}

GroupStart a_start() {
  GroupStart s;
  s.restart_count = 1;
  s.round.restart_count = 1;
  s.round.rank_offset = 4;
  s.round.world_size = 8;
  s.round.group_world_size = 4;
  s.round.group_rank = 2;
  s.round.master_addr = "10.0.0.5";
  s.round.master_port = 29500;
  s.base_env = {"PATH=/bin", "RANK=99", "MASTER_PORT=1"};
  s.agent_id = "123-abc";
  return s;
}

}  // namespace

TEST_CASE("standbys: kept while another start can come, one per local rank", "[standby_plan]") {
  AgentConfig c = python_job();
  CHECK(standbys_wanted(c, 0));
  CHECK(standbys_wanted(c, 1));
  CHECK_FALSE(standbys_wanted(c, 2));  // the last restart: none can follow on one node
  c.multi_node = MultiNodeConfig{};
  CHECK(standbys_wanted(c, 2));  // the coordinator decides, membership changes restart too
  c.standby_workers = false;
  CHECK_FALSE(standbys_wanted(c, 0));

  c = python_job();
  CHECK(standbys_to_start(c, 0, {false, false}) == std::vector<int>{0, 1});
  CHECK(standbys_to_start(c, 0, {true, false}) == std::vector<int>{1});
  CHECK(standbys_to_start(c, 0, {}) == std::vector<int>{0, 1});
  CHECK(standbys_to_start(c, 2, {false, false}).empty());
}

TEST_CASE("standbys: a Python worker's argv taken apart", "[standby_plan]") {
  auto p = python_program({"python3", "-u", "train.py", "--lr", "1"});
  REQUIRE(p);
  CHECK(p->flags == std::vector<std::string>{"-u"});
  CHECK_FALSE(p->module);
  CHECK(p->target == "train.py");
  CHECK(p->args == std::vector<std::string>{"--lr", "1"});
  p = python_program({"/usr/bin/python3", "-u", "-m", "pkg.train", "-m", "x"});
  REQUIRE(p);
  CHECK(p->module);
  CHECK(p->target == "pkg.train");
  CHECK(p->args == std::vector<std::string>{"-m", "x"});
  CHECK_FALSE(python_program({"python3", "-u", "-c", "print(1)"}));
  CHECK_FALSE(python_program({"python3", "-uc", "print(1)"}));
  CHECK_FALSE(python_program({"python3", "-u"}));
  CHECK_FALSE(python_program({"python3", "-u", "-m"}));
}

TEST_CASE("standbys: the per-round variables, derived from two starts", "[standby_plan]") {
  RunDirFixture f;
  AgentConfig c = python_job();
  GroupStart s = a_start();
  auto keys = per_round_keys(c, f.dir, s, 1);
  std::sort(keys.begin(), keys.end());
  // CRUN_CONTROL_FILE is the attempt's (agent/control_file.h).
  std::vector<std::string> want = {"CRUN_CONTROL_FILE", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK",
                                   "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_ERROR_FILE",
                                   "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "WORLD_SIZE"};
  CHECK(keys == want);
  s.heartbeats = true;  // the heartbeat file is the attempt's
  s.timer_file = "/run/timer";  // the file timer's FIFO is the job's
  keys = per_round_keys(c, f.dir, s, 1);
  std::sort(keys.begin(), keys.end());
  want.insert(want.begin() + 1, "CRUN_HEARTBEAT_FILE");
  CHECK(keys == want);
  s.state_root = "/dev/shm/crun-state-r-7";  // CRUN_STATE_DIR is the rank's: the round's too
  keys = per_round_keys(c, f.dir, s, 1);
  std::sort(keys.begin(), keys.end());
  want.insert(want.begin() + 2, "CRUN_STATE_DIR");
  CHECK(keys == want);
}

TEST_CASE("standbys: a standby's launch is the worker's without the round", "[standby_plan]") {
  RunDirFixture f;
  AgentConfig c = python_job();
  c.worker_cpus = {{0, 1}, {2, 3}};
  GroupStart s = a_start();
  s.heartbeats = true;
  const auto p = plan_standby_launch(c, f.dir, s, 1);
  REQUIRE(p);
  CHECK(p->program == "/usr/bin/python3");
  CHECK(p->argv == std::vector<std::string>{"python3", "-u", "-c", standby_bootstrap_source(), "1", "torch,numpy.linalg",
                                            "script", "train.py"});
  CHECK(p->cpus == std::vector<int>{2, 3});
  auto env = crun::test::env_map(p->env);
  CHECK(env["PATH"] == "/bin");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["LOCAL_WORLD_SIZE"] == "2");
  CHECK(env["CRUN_AGENT_ID"] == "123-abc");  // the keeper finds it by its marker
  CHECK(env["TORCHELASTIC_RUN_ID"] == "none");
  for (const char* k : {"RANK", "MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
                        "TORCHELASTIC_ERROR_FILE", "CRUN_HEARTBEAT_FILE", "CRUN_CONTROL_FILE", "GROUP_RANK"}) {
    CHECK(env.count(k) == 0);  // not even the agent's own RANK / MASTER_PORT
  }
  c.worker_argv = {"python3", "-u", "-c", "print(1)"};  // no script, no module
  CHECK_FALSE(plan_standby_launch(c, f.dir, s, 1));
}

TEST_CASE("standbys: which start a standby can take", "[standby_plan]") {
  RunDirFixture f;
  AgentConfig c = python_job();
  const auto standby = *plan_standby_launch(c, f.dir, a_start(), 0);
  GroupStart next = a_start();
  next.restart_count = next.round.restart_count = 2;
  next.round.master_port = 29501;
  auto worker = plan_worker_launch(c, f.dir, next, 0);
  CHECK(standby_misfit(standby, worker).empty());
  auto other = worker;
  other.cpus = {5};
  CHECK(standby_misfit(standby, other) == "the CPU binding changed");
  other = worker;
  other.argv[2] = "eval.py";
  CHECK(standby_misfit(standby, other) == "the program changed");
  other = worker;
  other.program = "/opt/python3";
  CHECK(standby_misfit(standby, other) == "the interpreter changed");
  other = worker;
  other.argv = {"python3", "-u", "-O", "train.py"};
  CHECK(standby_misfit(standby, other) == "the interpreter's flags changed");
  CHECK(standby_misfit(worker, worker) == "it was not planned as a standby");
}

TEST_CASE("standbys: the message carries the round's argv and environment, NUL-ended", "[standby_plan]") {
  WorkerLaunchPlan w;
  w.argv = {"python3", "-u", "-m", "pkg.train", "--lr", "1"};
  w.env = {"A=1", "RANK=3"};
  using namespace std::string_literals;
  CHECK(standby_message(w) == "crun-standby-1\0module\0pkg.train\0"
                              "2\0--lr\0001\0"
                              "6\0python3\0-u\0-m\0pkg.train\0--lr\0001\0"
                              "2\0A=1\0RANK=3\0"s);
}
