// parse_launch_options: torchrun's CLI and PET_* defaults -> AgentConfig, without running anything.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/launch_options.h"

using namespace crun;

namespace {

LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "crun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_launch_options(static_cast<int>(argv.size()), argv.data());
}

// Sets a variable for one scope and restores what was there before.
struct ScopedEnv {
  // A null value unsets the variable for the scope.
  ScopedEnv(const char* key, const char* value) : key_(key) {
    if (const char* old = std::getenv(key)) old_ = old;
    if (value != nullptr) ::setenv(key, value, 1);
    else ::unsetenv(key);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(key_, old_->c_str(), 1);
    else ::unsetenv(key_);
  }
  const char* key_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("a .py program runs as PYTHON_EXEC -u; -m runs a module; executables run as they are", "[launch_options]") {
  ScopedEnv py("PYTHON_EXEC", "/bin/sh");
  char plain[] = "/tmp/crun-launch-test-XXXXXX";  // a plain, non-executable file without .py
  const int fd = ::mkstemp(plain);
  REQUIRE(fd >= 0);
  ::close(fd);
  ::chmod(plain, 0644);
  const auto script = parse({"--nproc-per-node", "2", plain, "--lr", "3"});
  ::unlink(plain);
  REQUIRE(script.agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", plain, "--lr", "3"});
  const auto binary = parse({"/bin/true", "--lr", "3"});  // an executable without .py: exec'd directly
  REQUIRE(binary.agent.worker_argv == std::vector<std::string>{"/bin/true", "--lr", "3"});
  const auto module = parse({"-m", "pkg.train", "--epochs", "1"});
  REQUIRE(module.agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.train", "--epochs", "1"});
  const auto native = parse({"--no-python", "sh", "-c", "true"});
  REQUIRE(native.agent.worker_argv.front().find("/sh") != std::string::npos);
  REQUIRE(native.agent.worker_argv.size() == 3);
}

TEST_CASE("both spellings, PET_* defaults, flags win over the environment", "[launch_options]") {
  ScopedEnv nproc("PET_NPROC_PER_NODE", "3");
  ScopedEnv restarts("PET_MAX_RESTARTS", "4");
  auto o = parse({"--no_python", "/bin/true"});
  REQUIRE(o.agent.nproc_per_node == 3);
  REQUIRE(o.agent.max_restarts == 4);
  o = parse({"--nproc_per_node=5", "--max-restarts", "1", "--no-python", "/bin/true"});
  REQUIRE(o.agent.nproc_per_node == 5);
  REQUIRE(o.agent.max_restarts == 1);
}

TEST_CASE("nproc cpu/auto, stop timeout, master address and port", "[launch_options]") {
  auto o = parse({"--nproc-per-node", "cpu", "--stop-timeout", "2.5", "--master-addr", "10.0.0.1",
                  "--no-python", "/bin/true"});
  REQUIRE(o.agent.nproc_per_node == static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  REQUIRE(o.agent.stop_timeout == std::chrono::milliseconds(2500));
  REQUIRE(o.agent.master_addr == "10.0.0.1");
  REQUIRE_FALSE(o.agent.master_port.has_value());  // a free port per round
  o = parse({"--master-port", "29501", "--no-python", "/bin/true"});
  REQUIRE(o.agent.master_port == std::optional<std::uint16_t>(29501));
  REQUIRE(parse({"--nproc-per-node", "auto", "--no-python", "/bin/true"}).agent.nproc_per_node >= 1);
}

TEST_CASE("redirects, tee and local ranks filter per local rank", "[launch_options]") {
  const auto o = parse({"--nproc-per-node", "4", "-r", "0:1,3:3", "--tee", "2", "--local-ranks-filter", "1,3",
                        "--no-python", "/bin/true"});
  REQUIRE(o.agent.redirects == std::vector<unsigned>{1, 0, 0, 3});
  REQUIRE(o.agent.tee == std::vector<unsigned>{2, 2, 2, 2});
  REQUIRE(o.agent.console == std::vector<bool>{false, true, false, true});
}

TEST_CASE("signals: the four defaults plus --signals-to-handle", "[launch_options]") {
  const auto o = parse({"--signals-to-handle", "SIGUSR1,SIGTERM,SIGALRM", "--no-python", "/bin/true"});
  REQUIRE(o.agent.handled_signals == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM});
}

TEST_CASE("run id: --rdzv-id, or a fresh one per standalone job", "[launch_options]") {
  REQUIRE(parse({"--rdzv-id", "job7", "--no-python", "/bin/true"}).agent.run_id == "job7");
  const auto a = parse({"--standalone", "--no-python", "/bin/true"}).agent.run_id;
  const auto b = parse({"--standalone", "--no-python", "/bin/true"}).agent.run_id;
  REQUIRE(a.size() == 36);
  REQUIRE(a != b);
}

TEST_CASE("compatibility flags are accepted", "[launch_options]") {
  const auto o = parse({"--monitor-interval", "5", "--start-method", "fork", "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", "localhost:29400", "--rdzv-conf", "timeout=900", "--nnodes", "1:1",
                        "--node_rank", "0", "--local-addr", "127.0.0.1", "--role", "trainer", "--run-path",
                        "--no-python", "/bin/true"});
  REQUIRE(o.agent.role == "trainer");
}

TEST_CASE("--help and --version exit at once", "[launch_options]") {
  REQUIRE(parse({"--version"}).exit_now->rfind("crun ", 0) == 0);
  REQUIRE(parse({"--help"}).exit_now->find("--nproc-per-node") != std::string::npos);
}

TEST_CASE("usage errors name the flag", "[launch_options]") {
  REQUIRE_THROWS_WITH(parse({"--nproc-per-node", "x", "--no-python", "/bin/true"}), Catch::Contains("--nproc-per-node"));
  REQUIRE_THROWS_WITH(parse({"--max-restarts", "x", "--no-python", "/bin/true"}), Catch::Contains("--max-restarts"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2:4", "--no-python", "/bin/true"}), Catch::Contains("--nnodes") && Catch::Contains("static"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--no-python", "/bin/true"}), Catch::Contains("--node-rank: required"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "/bin/true"}), Catch::Contains("--rdzv-endpoint: required"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-conf", "bogus=1", "/bin/true"}),
                      Catch::Contains("unknown key 'bogus'"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-conf", "join_timeout=x", "/bin/true"}),
                      Catch::Contains("join_timeout"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1", "/bin/true"}),
                      Catch::Contains("--node-rank: must be in [0, 2)"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "etcd", "/bin/true"}), Catch::Contains("etcd"));
  REQUIRE_THROWS_WITH(parse({"--standalone", "--nnodes", "2", "/bin/true"}), Catch::Contains("--standalone"));
  REQUIRE_THROWS_AS(parse({}), LaunchUsageError);
}

TEST_CASE("multi-node flags become the agent's rendezvous configuration", "[launch_options]") {
  const auto c10d = parse({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-id", "j7",
                           "--rdzv-conf", "join_timeout=5,last_call_timeout=0.5,is_host=0,token=t0k,keep_alive_interval=1,keep_alive_max_attempt=4",
                           "--max-restarts", "2", "--local-addr", "10.1.2.9", "/bin/true", "--x"});
  REQUIRE(c10d.agent.multi_node);
  const auto& m = *c10d.agent.multi_node;
  CHECK(m.endpoint_host == "10.1.2.3");
  CHECK(m.endpoint_port == 29400);
  CHECK(m.is_host == std::optional<bool>(false));
  CHECK(m.token == "t0k");
  CHECK(m.local_addr == "10.1.2.9");
  CHECK(m.rendezvous.run_id == "j7");
  CHECK(m.rendezvous.min_nodes == 2);
  CHECK(m.rendezvous.max_nodes == 4);
  CHECK(m.rendezvous.max_restarts == 2);
  CHECK(m.rendezvous.join_timeout == std::chrono::milliseconds(5000));
  CHECK(m.rendezvous.last_call_timeout == std::chrono::milliseconds(500));
  CHECK(m.rendezvous.heartbeat_timeout == std::chrono::milliseconds(4000));  // interval x attempts
  CHECK(m.program == "true");
  // One boolean reader for --rdzv-conf and PET_* flags: "on"/"off" were refused here before.
  for (const char* word : {"on", "ON", "yes", "True"}) {
    INFO(word);
    const auto on = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-conf",
                           std::string("is_host=") + word, "/bin/true"});
    CHECK(on.agent.multi_node->is_host == std::optional<bool>(true));
  }
  CHECK_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-conf",
                           "is_host=maybe", "/bin/true"}),
                    Catch::Contains("is_host must be true or false"));

  const auto fixed = parse({"--nnodes", "3", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29511",
                            "/bin/true"});
  REQUIRE(fixed.agent.multi_node);
  CHECK(fixed.agent.multi_node->endpoint_host == "10.0.0.1");
  CHECK(fixed.agent.multi_node->endpoint_port == 29511);
  CHECK(fixed.agent.multi_node->is_host == std::optional<bool>(false));  // only node rank 0 hosts
  CHECK(fixed.agent.multi_node->rank_hint == 1);
  CHECK_FALSE(fixed.agent.master_port.has_value());  // the store holds 29511; workers get their own port

  CHECK_FALSE(parse({"--standalone", "--nproc-per-node", "2", "/bin/true"}).agent.multi_node);
  CHECK_FALSE(parse({"/bin/true"}).agent.multi_node);
}

TEST_CASE("Slurm: an srun step of agents derives the multi-node job; flags and PET_* win", "[launch_options][slurm]") {
  ScopedEnv job("SLURM_JOB_ID", "4242");
  ScopedEnv step("SLURM_STEP_ID", "3");
  ScopedEnv nodes("SLURM_STEP_NUM_NODES", "4");
  ScopedEnv tasks("SLURM_STEP_NUM_TASKS", "4");
  ScopedEnv list("SLURM_STEP_NODELIST", "localhost,h[2-4]");
  ScopedEnv node("SLURM_NODEID", "2");
  ScopedEnv gpus("SLURM_GPUS_ON_NODE", "3");
  auto o = parse({"/bin/true"});
  REQUIRE(o.agent.multi_node);
  const auto& m = *o.agent.multi_node;
  CHECK(m.rendezvous.min_nodes == 4);
  CHECK(m.rendezvous.max_nodes == 4);
  CHECK(m.endpoint_host == "localhost");  // the first host resolves, so it is used as it is
  CHECK(m.endpoint_port >= 20000);
  CHECK(m.endpoint_port < 30000);
  CHECK(m.rank_hint == 2);
  CHECK(m.is_host == std::optional<bool>(false));  // node 0 hosts, whatever the addresses say
  CHECK(m.rendezvous.run_id == "4242.3");
  CHECK(o.agent.nproc_per_node == 3);
  {
    ScopedEnv pet("PET_NPROC_PER_NODE", "2");
    CHECK(parse({"/bin/true"}).agent.nproc_per_node == 2);                               // PET_* > Slurm
    CHECK(parse({"--nproc-per-node", "1", "/bin/true"}).agent.nproc_per_node == 1);      // flag > PET_*
  }
  const auto standalone = parse({"--standalone", "/bin/true"});  // one node, whatever the step spans
  CHECK_FALSE(standalone.agent.multi_node);
  CHECK(standalone.agent.nproc_per_node == 3);
  const auto explicit_endpoint = parse({"--rdzv-endpoint", "127.0.0.1:29999", "/bin/true"});
  CHECK(explicit_endpoint.agent.multi_node->endpoint_port == 29999);
  CHECK_FALSE(explicit_endpoint.agent.multi_node->is_host.has_value());  // address match decides
  const auto printed = *parse({"--print-config", "/bin/true"}).exit_now;
  CHECK_THAT(printed, Catch::Contains("nnodes = 4  (SLURM_STEP_NUM_NODES)"));
  CHECK_THAT(printed, Catch::Contains("node_rank = 2  (SLURM_NODEID)"));
  CHECK_THAT(printed, Catch::Contains("nproc_per_node = 3  (SLURM_GPUS_ON_NODE)"));
  CHECK_THAT(printed, Catch::Contains("rdzv_backend = c10d  (Slurm step)"));
  CHECK_THAT(printed, Catch::Contains("max_restarts = 0  (default)"));
  {
    ScopedEnv many("SLURM_STEP_NUM_TASKS", "8");  // srun -n 8 crun ...: one agent per node only
    CHECK_THROWS_WITH(parse({"/bin/true"}), Catch::Contains("--slurm-tasks"));
  }
  {
    ScopedEnv bad("SLURM_NODEID", "x");
    CHECK_THROWS_WITH(parse({"/bin/true"}), Catch::Contains("SLURM_NODEID"));
  }
}

TEST_CASE("Slurm: the batch script itself runs one node", "[launch_options][slurm]") {
  ScopedEnv job("SLURM_JOB_ID", "77");
  ScopedEnv nodes("SLURM_JOB_NUM_NODES", "2");
  const auto o = parse({"/bin/true"});
  CHECK_FALSE(o.agent.multi_node);
  CHECK(o.agent.run_id == "77.batch");
  CHECK_THAT(o.note, Catch::Contains("srun --ntasks-per-node=1"));
}

TEST_CASE("platform MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE form a static multi-node job", "[launch_options][platform]") {
  ScopedEnv addr("MASTER_ADDR", "10.9.8.7");
  ScopedEnv port("MASTER_PORT", "23456");
  ScopedEnv rank("RANK", "1");
  ScopedEnv world("WORLD_SIZE", "3");
  auto o = parse({"--nproc-per-node", "2", "/bin/true"});
  REQUIRE(o.agent.multi_node);
  CHECK(o.agent.multi_node->endpoint_host == "10.9.8.7");
  CHECK(o.agent.multi_node->endpoint_port == 23456);
  CHECK(o.agent.multi_node->rank_hint == 1);
  CHECK(o.agent.multi_node->is_host == std::optional<bool>(false));
  CHECK(o.agent.multi_node->rendezvous.max_nodes == 3);
  {
    ScopedEnv pet("PET_NNODES", "1");  // PET_* > platform
    CHECK_FALSE(parse({"/bin/true"}).agent.multi_node);
  }
  CHECK_FALSE(parse({"--nnodes", "1", "/bin/true"}).agent.multi_node);  // flags > platform
  {
    ScopedEnv inside("TORCHELASTIC_RUN_ID", "x");  // a worker's own environment is not a platform's
    CHECK_FALSE(parse({"/bin/true"}).agent.multi_node);
  }
  {
    ScopedEnv bad("RANK", "3");
    CHECK_THROWS_WITH(parse({"/bin/true"}), Catch::Contains("RANK=3 is not below WORLD_SIZE=3"));
  }
  CHECK_THAT(*parse({"--print-config", "/bin/true"}).exit_now, Catch::Contains("node_rank = 1  (RANK (platform))"));
}

TEST_CASE("--slurm-tasks: the worker environment from the task's SLURM_* variables", "[launch_options][slurm]") {
  ScopedEnv job("SLURM_JOB_ID", "4242");
  ScopedEnv step("SLURM_STEP_ID", "0");
  ScopedEnv procid("SLURM_PROCID", "5");
  ScopedEnv localid("SLURM_LOCALID", "1");
  ScopedEnv nodeid("SLURM_NODEID", "1");
  ScopedEnv ntasks("SLURM_STEP_NUM_TASKS", "7");
  ScopedEnv nnodes("SLURM_STEP_NUM_NODES", "2");
  ScopedEnv per_node("SLURM_STEP_TASKS_PER_NODE", "4,3");
  ScopedEnv list("SLURM_STEP_NODELIST", "localhost,other");
  ScopedEnv restarts("SLURM_RESTART_COUNT", "2");
  ScopedEnv nccl("TORCH_NCCL_ASYNC_ERROR_HANDLING", nullptr);
  ScopedEnv legacy_nccl("NCCL_ASYNC_ERROR_HANDLING", nullptr);
  ScopedEnv error_file("TORCHELASTIC_ERROR_FILE", nullptr);
  auto o = parse({"--slurm-tasks", "/bin/true", "x"});
  REQUIRE(o.slurm_tasks);
  std::map<std::string, std::string> env(o.task_env.begin(), o.task_env.end());
  CHECK(env["RANK"] == "5");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "7");
  CHECK(env["LOCAL_WORLD_SIZE"] == "3");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["MASTER_ADDR"] == "localhost");
  CHECK(std::stoi(env["MASTER_PORT"]) >= 20000);
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "4242.0");
  CHECK(env["ROLE_RANK"] == "5");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  // The agent's builder (agent/worker_env.h) makes the rest: NCCL error handling as under the
  // agent, and no error file, which nobody would read without an agent.
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(env.count("TORCHELASTIC_ERROR_FILE") == 0);
  CHECK(o.agent.worker_argv == std::vector<std::string>{"/bin/true", "x"});
  const auto again = parse({"--slurm-tasks", "/bin/true"}).task_env;
  std::map<std::string, std::string> same(again.begin(), again.end());
  CHECK(same["MASTER_PORT"] == env["MASTER_PORT"]);
  CHECK_THROWS_WITH(parse({"--slurm-tasks", "--nproc-per-node", "2", "/bin/true"}), Catch::Contains("does not apply"));
  {
    ScopedEnv gone("SLURM_PROCID", "");
    CHECK_THROWS_WITH(parse({"--slurm-tasks", "/bin/true"}), Catch::Contains("SLURM_PROCID is not set"));
  }
}
