// resolve_launch_plan: torchrun's CLI, an injected environment (EnvSnapshot) and injected host
// facts (HostFacts) -> the typed launch plan and the AgentConfig built from it, without running
// anything and without touching the process environment.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/exit_codes.h"
#include "launcher/launch_options.h"
#include "launcher/launch_plan.h"
#include "launcher/print_config.h"
#include "launcher/torch2_settings.h"
#include "tests/launcher/test_host.h"

using namespace crun;
using crun::test::test_host;

namespace {

LaunchPlan plan(std::vector<std::string> args, const EnvSnapshot& env = {}, const HostFacts& host = test_host()) {
  args.insert(args.begin(), "crun");
  return resolve_launch_plan(args, env, host);
}

LaunchOptions parse(std::vector<std::string> args, const EnvSnapshot& env = {}, const HostFacts& host = test_host()) {
  return to_launch_options(plan(std::move(args), env, host));
}

std::string source_of(const LaunchPlan& p, const std::string& key) {
  for (const auto& [k, v] : p.settings) {
    if (k == key) return v.source;
  }
  return "(no such setting)";
}

// The one-line usage error `args` under `env` raises ("" when none).
std::string usage_error(std::vector<std::string> args, const EnvSnapshot& env = {}, const HostFacts& host = test_host()) {
  try {
    (void)plan(std::move(args), env, host);
  } catch (const LaunchUsageError& e) {
    return e.what();
  }
  return "";
}

const EnvSnapshot kSlurmStep{{
    {"SLURM_JOB_ID", "4242"},
    {"SLURM_STEP_ID", "3"},
    {"SLURM_STEP_NUM_NODES", "4"},
    {"SLURM_STEP_NUM_TASKS", "4"},
    {"SLURM_STEP_NODELIST", "localhost,h[2-4]"},
    {"SLURM_NODEID", "2"},
    {"SLURM_GPUS_ON_NODE", "3"},
}};

const EnvSnapshot kPlatform{{{"MASTER_ADDR", "10.9.8.7"}, {"MASTER_PORT", "23456"}, {"RANK", "1"}, {"WORLD_SIZE", "3"}}};

EnvSnapshot with(EnvSnapshot env, const std::string& key, const std::string& value) {
  env.vars[key] = value;
  return env;
}

}  // namespace

TEST_CASE("a .py program runs as PYTHON_EXEC -u; -m runs a module; executables run as they are", "[launch_plan]") {
  const EnvSnapshot env{{{"PYTHON_EXEC", "/bin/sh"}}};
  char plain[] = "/tmp/crun-launch-test-XXXXXX";  // a plain, non-executable file without .py
  const int fd = ::mkstemp(plain);
  REQUIRE(fd >= 0);
  ::close(fd);
  ::chmod(plain, 0644);
  const auto script = parse({"--nproc-per-node", "2", plain, "--lr", "3"}, env);
  ::unlink(plain);
  REQUIRE(script.agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", plain, "--lr", "3"});
  const auto binary = parse({"/bin/true", "--lr", "3"}, env);  // an executable without .py: exec'd directly
  REQUIRE(binary.agent.worker_argv == std::vector<std::string>{"/bin/true", "--lr", "3"});
  const auto module = parse({"-m", "pkg.train", "--epochs", "1"}, env);
  REQUIRE(module.agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.train", "--epochs", "1"});
  const auto native = parse({"--no-python", "sh", "-c", "true"}, env);
  CHECK(native.agent.worker_program.find("/sh") != std::string::npos);  // found on $PATH
  CHECK(native.agent.worker_argv == std::vector<std::string>{"sh", "-c", "true"});  // argv[0] as written
  const auto bare = parse({"true"}, env);  // no file "true" here: $PATH, exec'd directly
  CHECK(bare.agent.worker_argv.front() == "true");
  CHECK(bare.agent.worker_program.find("/true") != std::string::npos);
  CHECK_THAT(usage_error({"-m", "pkg"}, EnvSnapshot{{{"PYTHON_EXEC", "crun-no-such-python"}}}),
             Catch::Contains("Python interpreter not found: crun-no-such-python"));
  // $PYTHON_EXEC found on $PATH: the workers' argv[0] is it as written, as torchrun's.
  const auto bare_python = parse({"-m", "pkg"}, EnvSnapshot{{{"PYTHON_EXEC", "sh"}}});
  CHECK(bare_python.agent.worker_argv.front() == "sh");
  CHECK(bare_python.agent.worker_program.find("/sh") != std::string::npos);
}

TEST_CASE("-- ends crun's options: a program whose name starts with '-' runs, its arguments untouched", "[launch_plan]") {
  char dir[] = "/tmp/crun-dash-test-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string old_cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  {
    std::ofstream("-dash.sh") << "#!/bin/sh\ntrue\n";
  }
  ::chmod("-dash.sh", 0755);
  const auto dashed = parse({"--standalone", "--nproc-per-node", "1", "--", "-dash.sh", "a", "--", "-x"});
  const auto unknown = usage_error({"--standalone", "-dash.sh", "a"});  // without --: an unknown option
  std::filesystem::remove_all(dir);
  std::filesystem::current_path(old_cwd);
  CHECK(dashed.agent.worker_program == "-dash.sh");
  CHECK(dashed.agent.worker_argv == std::vector<std::string>{"-dash.sh", "a", "--", "-x"});
  CHECK_THAT(unknown, Catch::Contains("unknown option -dash.sh"));
  // A program that starts with '-' after --, found nowhere: named as a program, not as an option.
  CHECK_THAT(usage_error({"--no-python", "--", "-no-such-program"}), Catch::Contains("program not found or not executable: -no-such-program"));
}

TEST_CASE("both spellings, PET_* defaults, flags win over the environment", "[launch_plan]") {
  const EnvSnapshot env{{{"PET_NPROC_PER_NODE", "3"}, {"PET_MAX_RESTARTS", "4"}}};
  auto o = parse({"--no_python", "/bin/true"}, env);
  REQUIRE(o.agent.nproc_per_node == 3);
  REQUIRE(o.agent.max_restarts == 4);
  o = parse({"--nproc_per_node=5", "--max-restarts", "1", "--no-python", "/bin/true"}, env);
  REQUIRE(o.agent.nproc_per_node == 5);
  REQUIRE(o.agent.max_restarts == 1);
}

TEST_CASE("each setting carries its source: flag > PET_* > Slurm > default", "[launch_plan]") {
  const auto by_default = plan({"/bin/true"});
  CHECK(by_default.nproc_per_node.value == 1);
  CHECK(by_default.nproc_per_node.source == "default");
  CHECK(source_of(by_default, "nproc_per_node") == "default");

  const auto from_slurm = plan({"/bin/true"}, kSlurmStep);
  CHECK(from_slurm.nproc_per_node.value == 3);
  CHECK(from_slurm.nproc_per_node.source == "SLURM_GPUS_ON_NODE");
  CHECK(from_slurm.nnodes.source == "SLURM_STEP_NUM_NODES");
  CHECK(from_slurm.job_kind == "slurm");

  const auto from_pet = plan({"/bin/true"}, with(kSlurmStep, "PET_NPROC_PER_NODE", "2"));
  CHECK(from_pet.nproc_per_node.value == 2);
  CHECK(from_pet.nproc_per_node.source == "PET_NPROC_PER_NODE");

  const auto from_flag = plan({"--nproc_per_node", "5", "/bin/true"}, with(kSlurmStep, "PET_NPROC_PER_NODE", "2"));
  CHECK(from_flag.nproc_per_node.value == 5);
  CHECK(from_flag.nproc_per_node.source == "--nproc-per-node");  // the long spelling names it
  CHECK(plan({"-r", "1", "/bin/true"}).redirects.source == "--redirects");

  // An on/off flag's PET_* variable is read by the one boolean reader; empty means off.
  CHECK(plan({"/bin/true"}, EnvSnapshot{{{"PET_STANDALONE", "yes"}}}).standalone.value);
  CHECK(plan({"/bin/true"}, EnvSnapshot{{{"PET_STANDALONE", "yes"}}}).standalone.source == "PET_STANDALONE");
  CHECK_FALSE(plan({"/bin/true"}, EnvSnapshot{{{"PET_STANDALONE", ""}}}).standalone.value);
  CHECK_THAT(usage_error({"/bin/true"}, EnvSnapshot{{{"PET_STANDALONE", "maybe"}}}),
             Catch::Equals("PET_STANDALONE: expected true or false, got 'maybe'"));
}

TEST_CASE("nproc cpu/gpu/auto come from the host's facts; stop timeout, master address and port", "[launch_plan]") {
  auto o = parse({"--nproc-per-node", "cpu", "--stop-timeout", "2.5", "--master-addr", "10.0.0.1",
                  "--no-python", "/bin/true"});
  REQUIRE(o.agent.nproc_per_node == 8);
  REQUIRE(o.agent.stop_timeout == std::chrono::milliseconds(2500));
  REQUIRE(o.agent.master_addr == "10.0.0.1");
  REQUIRE_FALSE(o.agent.master_port.has_value());  // a free port per round
  o = parse({"--master-port", "29501", "--no-python", "/bin/true"});
  REQUIRE(o.agent.master_port == std::optional<std::uint16_t>(29501));
  REQUIRE(parse({"--nproc-per-node", "auto", "--no-python", "/bin/true"}).agent.nproc_per_node == 8);
  HostFacts gpus = test_host();
  gpus.gpus = 2;
  CHECK(parse({"--nproc-per-node", "auto", "/bin/true"}, {}, gpus).agent.nproc_per_node == 2);
  CHECK(parse({"--nproc-per-node", "gpu", "/bin/true"}, {}, gpus).agent.nproc_per_node == 2);
  CHECK_THAT(usage_error({"--nproc-per-node", "gpu", "/bin/true"}), Catch::Contains("--nproc-per-node gpu: no GPU"));
  CHECK(parse({"/bin/true"}).agent.hostname == "node-a");
}

TEST_CASE("redirects, tee and local ranks filter per local rank", "[launch_plan]") {
  const auto o = parse({"--nproc-per-node", "4", "-r", "0:1,3:3", "--tee", "2", "--local-ranks-filter", "1,3",
                        "--no-python", "/bin/true"});
  REQUIRE(o.agent.redirects == std::vector<unsigned>{1, 0, 0, 3});
  REQUIRE(o.agent.tee == std::vector<unsigned>{2, 2, 2, 2});
  REQUIRE(o.agent.console == std::vector<bool>{false, true, false, true});
}

TEST_CASE("signals: the four defaults plus --signals-to-handle", "[launch_plan]") {
  const auto o = parse({"--signals-to-handle", "SIGUSR1,SIGTERM,SIGALRM", "--no-python", "/bin/true"});
  REQUIRE(o.agent.handled_signals == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM});
}

TEST_CASE("run id: --rdzv-id, or a fresh one per standalone job", "[launch_plan]") {
  REQUIRE(parse({"--rdzv-id", "job7", "--no-python", "/bin/true"}).agent.run_id == "job7");
  const auto a = plan({"--standalone", "--no-python", "/bin/true"}).run_id;
  const auto b = parse({"--standalone", "--no-python", "/bin/true"}).agent.run_id;
  REQUIRE(a.value.size() == 36);
  REQUIRE(a.value != b);
  CHECK(a.source == "fresh (standalone)");
}

TEST_CASE("compatibility flags are accepted", "[launch_plan]") {
  const auto o = parse({"--monitor-interval", "5", "--start-method", "fork", "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", "localhost:29400", "--rdzv-conf", "timeout=900", "--nnodes", "1:1",
                        "--node_rank", "0", "--local-addr", "127.0.0.1", "--role", "trainer", "--run-path",
                        "--no-python", "/bin/true"});
  REQUIRE(o.agent.role == "trainer");
}

TEST_CASE("--help and --version exit at once", "[launch_plan]") {
  REQUIRE(parse({"--version"}).exit_now->rfind("crun ", 0) == 0);
  REQUIRE(parse({"--help"}).exit_now->find("--nproc-per-node") != std::string::npos);
  // The exit codes, from their one table (base/exit_codes.h), one a line.
  const std::string usage = *parse({"--help"}).exit_now;
  for (const auto& row : crun::kExitCodes) {
    CHECK_THAT(usage, Catch::Contains("\n  " + std::string(row.code) + " ") &&
                          Catch::Contains(std::string(row.summary) + "\n"));
  }
  // CLI11 is given only the settings on the command line, except for the help: all of them.
  const auto help = parse({"--nnodes", "2", "-h", "/bin/true"}).exit_now;
  REQUIRE(help);
  for (const char* flag : {"--nproc-per-node", "--rdzv-endpoint", "--max-restarts", "--event-log-handler", "--standalone"}) {
    CHECK(help->find(flag) != std::string::npos);
  }
}

TEST_CASE("short flags cluster as argparse's do", "[launch_plan]") {
  // -m takes no value, so "-mr2" is -m -r 2 (argparse reads it so); the scan before CLI11 stops
  // there, and CLI11 must still know every setting to read it.
  const auto o = parse({"-mr2", "pkg.train"}, EnvSnapshot{{{"PYTHON_EXEC", "sh"}}});
  REQUIRE(o.agent.worker_argv.size() == 4);
  CHECK(std::vector<std::string>(o.agent.worker_argv.begin() + 1, o.agent.worker_argv.end()) ==
        std::vector<std::string>{"-u", "-m", "pkg.train"});
  CHECK(o.agent.redirects == std::vector<unsigned>{2});
}

TEST_CASE("usage errors are one line naming the flag or variable", "[launch_plan]") {
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
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "etcd", "/bin/true"}), Catch::Contains("use etcd-v3"));
  REQUIRE_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "etcd-v2", "/bin/true"}), Catch::Contains("use etcd-v3"));
  REQUIRE_THROWS_WITH(parse({"--standalone", "--nnodes", "2", "/bin/true"}), Catch::Contains("--standalone"));
  REQUIRE_THROWS_AS(parse({}), LaunchUsageError);

  // Each message is one line and names its flag or variable, whichever source the value came from.
  const std::vector<std::pair<std::vector<std::string>, EnvSnapshot>> cases = {
      {{"--rdzv-backend", "zk", "/bin/true"}, {}},
      {{"--rdzv-backend", "etcd", "/bin/true"}, {}},  // single node too: rejected once, the same way
      {{"--rdzv-conf", "no-equals", "/bin/true"}, {}},  // single node too: the syntax is checked
      {{"--master-port", "70000", "/bin/true"}, {}},
      {{"--rdzv-endpoint", ":29400", "/bin/true"}, {}},
      {{"/bin/true"}, EnvSnapshot{{{"PET_NNODES", "x"}}}},
      {{"/bin/true"}, EnvSnapshot{{{"PET_MAX_RESTARTS", "-1"}}}},
      {{"/bin/true"}, with(kSlurmStep, "SLURM_NODEID", "x")},
      {{"/bin/true"}, with(kPlatform, "WORLD_SIZE", "0")},
      {{"/bin/true"}, with(kPlatform, "MASTER_PORT", "http")},
  };
  const std::vector<std::string> names = {"--rdzv-backend", "--rdzv-backend etcd", "--rdzv-conf", "--master-port",
                                          "--rdzv-endpoint", "--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got 'x' (from PET_NNODES)",
                                          "--max-restarts", "SLURM_NODEID",
                                          "WORLD_SIZE", "MASTER_PORT"};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string e = usage_error(cases[i].first, cases[i].second);
    INFO(names[i] << ": " << e);
    CHECK_THAT(e, Catch::Contains(names[i]));
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("multi-node flags become the agent's rendezvous configuration", "[launch_plan]") {
  const EnvSnapshot token{{{"CRUN_RDZV_TOKEN", "from-env"}}};
  const auto c10d = parse({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-id", "j7",
                           "--rdzv-conf", "join_timeout=5,last_call_timeout=0.5,is_host=0,token=t0k,keep_alive_interval=1,keep_alive_max_attempt=4",
                           "--max-restarts", "2", "--local-addr", "10.1.2.9", "/bin/true", "--x"},
                          token);
  REQUIRE(c10d.agent.multi_node);
  const auto& m = *c10d.agent.multi_node;
  CHECK(m.endpoint.host == "10.1.2.3");
  CHECK(m.endpoint.port == 29400);
  CHECK_FALSE(m.is_host);
  CHECK(m.token == "t0k");  // --rdzv-conf token > $CRUN_RDZV_TOKEN
  CHECK(m.local_addr == "10.1.2.9");
  CHECK(m.rendezvous.run_id == "j7");
  CHECK(m.rendezvous.min_nodes == 2);
  CHECK(m.rendezvous.max_nodes == 4);
  CHECK(m.rendezvous.max_restarts == 2);
  CHECK(m.rendezvous.join_timeout == std::chrono::milliseconds(5000));
  CHECK(m.rendezvous.last_call_timeout == std::chrono::milliseconds(500));
  CHECK(m.rendezvous.heartbeat_timeout == std::chrono::milliseconds(4000));  // interval x attempts
  CHECK(m.program == "true");
  CHECK(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "/bin/true"}, token)
            .agent.multi_node->token == "from-env");
  // One boolean reader for --rdzv-conf and PET_* flags: "on"/"off" were refused here before.
  for (const char* word : {"on", "ON", "yes", "True"}) {
    INFO(word);
    const auto on = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-conf",
                           std::string("is_host=") + word, "/bin/true"});
    CHECK(on.agent.multi_node->is_host);
  }
  CHECK_THROWS_WITH(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3", "--rdzv-conf",
                           "is_host=maybe", "/bin/true"}),
                    Catch::Contains("is_host must be true or false"));

  const auto fixed = parse({"--nnodes", "3", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29511",
                            "/bin/true"});
  REQUIRE(fixed.agent.multi_node);
  CHECK(fixed.agent.multi_node->endpoint.host == "10.0.0.1");
  CHECK(fixed.agent.multi_node->endpoint.port == 29511);
  CHECK_FALSE(fixed.agent.multi_node->is_host);  // only node rank 0 hosts
  CHECK(fixed.agent.multi_node->rank_hint == 1);
  CHECK_FALSE(fixed.agent.master_port.has_value());  // the store holds 29511 and serves the workers too
  CHECK(fixed.agent.multi_node->workers_use_agent_store);

  CHECK_FALSE(parse({"--standalone", "--nproc-per-node", "2", "/bin/true"}).agent.multi_node);
  CHECK_FALSE(parse({"/bin/true"}).agent.multi_node);
}

TEST_CASE("workers share the agents' store (torchrun's agent store) unless a token guards it", "[launch_plan]") {
  auto c10d = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400", "/bin/true"});
  CHECK(c10d.agent.multi_node->workers_use_agent_store);
  auto conf_token = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400",
                           "--rdzv-conf", "token=s3cret", "/bin/true"});
  CHECK_FALSE(conf_token.agent.multi_node->workers_use_agent_store);  // torch's clients cannot present it
  auto env_token = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400", "/bin/true"},
                         EnvSnapshot{{{"CRUN_RDZV_TOKEN", "s3cret"}}});
  CHECK_FALSE(env_token.agent.multi_node->workers_use_agent_store);
  auto opt_out = parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400", "/bin/true"},
                       EnvSnapshot{{{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}});
  CHECK_FALSE(opt_out.agent.multi_node->workers_use_agent_store);  // torch 2.x's opt-out
  auto etcd = parse({"--nnodes", "2", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "10.1.2.3:2379", "/bin/true"});
  CHECK_FALSE(etcd.agent.multi_node->workers_use_agent_store);  // no agents' store
  CHECK_THAT(*parse({"--print-config", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400",
                     "/bin/true"}).exit_now,
             Catch::Contains("workers_store = the agents' store (TORCHELASTIC_USE_AGENT_STORE=True)"));
}

TEST_CASE("c10d: the launcher decides who hosts the store from this host's addresses", "[launch_plan]") {
  auto c10d = [](const std::string& endpoint, const std::string& conf = "") {
    std::vector<std::string> args = {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint};
    if (!conf.empty()) args.insert(args.end(), {"--rdzv-conf", conf});
    args.push_back("/bin/true");
    const auto p = plan(args);
    REQUIRE(p.multi_node);
    return *p.multi_node;
  };
  const auto by_name = c10d("node-a:29400");  // a name that resolves to one of our addresses
  CHECK(by_name.config.is_host);
  CHECK(by_name.config.bind_address == "10.0.0.5");
  CHECK(by_name.config.endpoint.host == "node-a");  // the endpoint stays as written
  CHECK_THAT(by_name.host_source, Catch::Contains("is one of this host's addresses"));
  CHECK(by_name.endpoint_source == "--rdzv-endpoint");

  const auto literal = c10d("10.0.0.5:29400");
  CHECK(literal.config.is_host);
  CHECK(literal.config.bind_address == "10.0.0.5");

  const auto other = c10d("node-b:29400");
  CHECK_FALSE(other.config.is_host);
  CHECK(other.config.bind_address.empty());
  CHECK_THAT(other.host_source, Catch::Contains("not one of"));
  CHECK_FALSE(c10d("192.0.2.7:29400").config.is_host);
  CHECK_FALSE(c10d("unknown-host:29400").config.is_host);

  const auto forbidden = c10d("node-a:29400", "is_host=0");  // --rdzv-conf is_host wins either way
  CHECK_FALSE(forbidden.config.is_host);
  CHECK(forbidden.host_source == "--rdzv-conf is_host");
  const auto forced = c10d("node-b:29400", "is_host=1");
  CHECK(forced.config.is_host);
  CHECK(forced.config.bind_address.empty());  // not ours: the agent listens on every interface

  const auto v6 = c10d("[::1]:29401");
  CHECK(v6.config.endpoint.host == "::1");
  CHECK(v6.config.endpoint.port == 29401);
  CHECK(v6.config.is_host);  // loopback is this host, though not among this test host's addresses
  CHECK(v6.config.bind_address == "::1");
  const auto lo2 = c10d("127.0.0.2:29401");  // all of 127.0.0.0/8 is loopback
  CHECK(lo2.config.is_host);
  CHECK(lo2.config.bind_address == "127.0.0.2");
  CHECK_FALSE(c10d("[2001:db8::1]:29401").config.is_host);
  CHECK_FALSE(c10d("128.0.0.1:29401").config.is_host);
}

TEST_CASE("static: node rank 0 hosts the store", "[launch_plan]") {
  const auto p = plan({"--nnodes", "2", "--node-rank", "0", "--master-addr", "node-a", "/bin/true"});
  REQUIRE(p.multi_node);
  CHECK(p.multi_node->config.is_host);
  CHECK(p.multi_node->config.bind_address == "10.0.0.5");
  CHECK(p.multi_node->config.endpoint.port == 29500);
  CHECK(p.multi_node->host_source == "node rank 0 (static)");
  CHECK(p.multi_node->endpoint_source == "master_addr:master_port");
  const auto forced = plan({"--nnodes", "2", "--node-rank", "1", "--master-addr", "node-b", "--rdzv-conf", "is_host=1", "/bin/true"});
  CHECK(forced.multi_node->config.is_host);
}

TEST_CASE("static asked for with one node hosts the agents' store, as torchrun's static rendezvous does", "[launch_plan]") {
  const auto o = parse({"--nnodes", "1", "--node-rank", "0", "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
                        "--master-port", "29611", "/bin/true"});
  REQUIRE(o.agent.multi_node);
  CHECK(o.agent.multi_node->is_host);
  CHECK(o.agent.multi_node->endpoint.host == "127.0.0.1");
  CHECK(o.agent.multi_node->endpoint.port == 29611);
  CHECK(o.agent.multi_node->workers_use_agent_store);
  CHECK(o.agent.multi_node->rendezvous.min_nodes == 1);
  CHECK(o.agent.multi_node->rendezvous.max_nodes == 1);
  // torchrun's defaults for what is not given: node rank 0, the store at 127.0.0.1:29500.
  const auto bare = parse({"--rdzv-backend", "static", "/bin/true"});
  REQUIRE(bare.agent.multi_node);
  CHECK(bare.agent.multi_node->endpoint.port == 29500);
  CHECK(bare.agent.multi_node->is_host);
  const auto pet = parse({"/bin/true"}, EnvSnapshot{{{"PET_RDZV_BACKEND", "static"}}});
  CHECK(pet.agent.multi_node);
  // Not asked for (the default backend): one node, no agents' store; workers on a free port.
  CHECK_FALSE(parse({"--nnodes", "1", "/bin/true"}).agent.multi_node);
  CHECK_FALSE(parse({"--master-port", "29611", "/bin/true"}).agent.multi_node);
  CHECK_THAT(usage_error({"--rdzv-backend", "static", "--node-rank", "1", "/bin/true"}),
             Catch::Contains("--node-rank: must be in [0, 1)"));
}

TEST_CASE("Slurm: an srun step of agents derives the multi-node job; flags and PET_* win", "[launch_plan][slurm]") {
  auto o = parse({"/bin/true"}, kSlurmStep);
  REQUIRE(o.agent.multi_node);
  const auto& m = *o.agent.multi_node;
  CHECK(m.rendezvous.min_nodes == 4);
  CHECK(m.rendezvous.max_nodes == 4);
  CHECK(m.endpoint.host == "localhost");  // the first host resolves, so it is used as it is
  CHECK(m.endpoint.port >= 20000);
  CHECK(m.endpoint.port < 30000);
  CHECK(m.rank_hint == 2);
  CHECK_FALSE(m.is_host);  // node 0 hosts, whatever the addresses say (localhost is ours)
  CHECK(m.rendezvous.run_id == "4242.3");
  CHECK(o.agent.nproc_per_node == 3);
  CHECK(plan({"/bin/true"}, kSlurmStep).multi_node->host_source == "SLURM_NODEID");
  CHECK(parse({"/bin/true"}, with(kSlurmStep, "PET_NPROC_PER_NODE", "2")).agent.nproc_per_node == 2);  // PET_* > Slurm
  CHECK(parse({"--nproc-per-node", "1", "/bin/true"}, with(kSlurmStep, "PET_NPROC_PER_NODE", "2")).agent.nproc_per_node == 1);  // flag > PET_*
  const auto standalone = parse({"--standalone", "/bin/true"}, kSlurmStep);  // one node, whatever the step spans
  CHECK_FALSE(standalone.agent.multi_node);
  CHECK(standalone.agent.nproc_per_node == 3);
  const auto explicit_endpoint = plan({"--rdzv-endpoint", "127.0.0.1:29999", "/bin/true"}, kSlurmStep);
  CHECK(explicit_endpoint.multi_node->config.endpoint.port == 29999);
  CHECK(explicit_endpoint.multi_node->config.is_host);  // not Slurm's endpoint: the address match decides
  CHECK_THAT(explicit_endpoint.multi_node->host_source, Catch::Contains("this host's addresses"));
  const auto printed = *parse({"--print-config", "/bin/true"}, kSlurmStep).exit_now;
  CHECK_THAT(printed, Catch::Contains("mode = multi-node  (slurm environment)"));
  CHECK_THAT(printed, Catch::Contains("nnodes = 4  (SLURM_STEP_NUM_NODES)"));
  CHECK_THAT(printed, Catch::Contains("node_rank = 2  (SLURM_NODEID)"));
  CHECK_THAT(printed, Catch::Contains("nproc_per_node = 3  (SLURM_GPUS_ON_NODE)"));
  CHECK_THAT(printed, Catch::Contains("rdzv_backend = c10d  (Slurm step)"));
  CHECK_THAT(printed, Catch::Contains("max_restarts = 0  (default)"));
  CHECK_THAT(printed, Catch::Contains("store_host = another node  (SLURM_NODEID)"));
  CHECK_THAT(printed, Catch::Contains("run_id = 4242.3  (SLURM_JOB_ID.SLURM_STEP_ID)"));
  CHECK_THROWS_WITH(parse({"/bin/true"}, with(kSlurmStep, "SLURM_STEP_NUM_TASKS", "8")),  // srun -n 8 crun ...
                    Catch::Contains("--slurm-tasks"));
  CHECK_THROWS_WITH(parse({"/bin/true"}, with(kSlurmStep, "SLURM_NODEID", "x")), Catch::Contains("SLURM_NODEID"));
}

TEST_CASE("Slurm: a first node that does not resolve is reached at scontrol's NodeAddr", "[launch_plan][slurm]") {
  EnvSnapshot env = with(kSlurmStep, "SLURM_STEP_NODELIST", "n[1-2]");
  env.vars["SLURM_STEP_NUM_NODES"] = "2";
  env.vars["SLURM_STEP_NUM_TASKS"] = "2";
  env.vars["SLURM_NODEID"] = "0";
  const auto p = plan({"--print-config", "/bin/true"}, env);
  REQUIRE(p.multi_node);
  CHECK(p.multi_node->config.endpoint.host == "10.0.0.5");
  CHECK(p.multi_node->config.is_host);  // node 0
  CHECK(p.multi_node->config.bind_address == "10.0.0.5");
  CHECK_THAT(source_of(p, "rdzv_endpoint"), Catch::Contains("n1's NodeAddr from scontrol"));
  {
    // The one line, matched alone: std::regex recurses once a character, and the whole
    // --print-config text overflowed the stack of an ASan build.
    const std::string text = *to_launch_options(p).exit_now;
    const auto at = text.find("rdzv_endpoint = ");
    REQUIRE(at != std::string::npos);
    const std::string line = text.substr(at, text.find('\n', at) - at);
    CHECK_THAT(line, Catch::Matches("rdzv_endpoint = 10\\.0\\.0\\.5:2[0-9]{4}  \\(first host of SLURM_STEP_NODELIST.*"));
  }

  HostFacts no_scontrol = test_host();
  no_scontrol.slurm_node_addr = nullptr;
  CHECK_THAT(usage_error({"/bin/true"}, env, no_scontrol), Catch::Contains("the first Slurm node 'n1' does not resolve"));
  CHECK(plan({"--rdzv-endpoint", "node-a", "/bin/true"}, env, no_scontrol).multi_node->config.endpoint.host == "node-a");
}

TEST_CASE("Slurm: the batch script itself runs one node", "[launch_plan][slurm]") {
  const EnvSnapshot env{{{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NUM_NODES", "2"}}};
  const auto o = parse({"/bin/true"}, env);
  CHECK_FALSE(o.agent.multi_node);
  CHECK(o.agent.run_id == "77.batch");
  CHECK_THAT(o.note, Catch::Contains("srun --ntasks-per-node=1"));
  CHECK(parse({"--standalone", "/bin/true"}, env).note.empty());  // --standalone: the job's shape is not used
}

TEST_CASE("platform MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE form a static multi-node job", "[launch_plan][platform]") {
  auto o = parse({"--nproc-per-node", "2", "/bin/true"}, kPlatform);
  REQUIRE(o.agent.multi_node);
  CHECK(o.agent.multi_node->endpoint.host == "10.9.8.7");
  CHECK(o.agent.multi_node->endpoint.port == 23456);
  CHECK(o.agent.multi_node->rank_hint == 1);
  CHECK_FALSE(o.agent.multi_node->is_host);
  CHECK(o.agent.multi_node->rendezvous.max_nodes == 3);
  CHECK(parse({"/bin/true"}, with(kPlatform, "RANK", "0")).agent.multi_node->is_host);  // rank 0 hosts
  CHECK_FALSE(parse({"/bin/true"}, with(kPlatform, "PET_NNODES", "1")).agent.multi_node);  // PET_* > platform
  CHECK_FALSE(parse({"--nnodes", "1", "/bin/true"}, kPlatform).agent.multi_node);           // flags > platform
  // A worker's own environment is not a platform's.
  CHECK_FALSE(parse({"/bin/true"}, with(kPlatform, "TORCHELASTIC_RUN_ID", "x")).agent.multi_node);
  CHECK_THROWS_WITH(parse({"/bin/true"}, with(kPlatform, "RANK", "3")), Catch::Contains("RANK=3 is not below WORLD_SIZE=3"));
  const auto printed = *parse({"--print-config", "/bin/true"}, kPlatform).exit_now;
  CHECK_THAT(printed, Catch::Contains("node_rank = 1  (RANK (platform))"));
  CHECK_THAT(printed, Catch::Contains("store_endpoint = 10.9.8.7:23456  (master_addr:master_port)"));
  CHECK_THAT(printed, Catch::Contains("store_host = another node  (node rank 0 (static))"));
}

TEST_CASE("--slurm-tasks: the worker environment from the task's SLURM_* variables", "[launch_plan][slurm]") {
  const EnvSnapshot env{{
      {"SLURM_JOB_ID", "4242"},
      {"SLURM_STEP_ID", "0"},
      {"SLURM_PROCID", "5"},
      {"SLURM_LOCALID", "1"},
      {"SLURM_NODEID", "1"},
      {"SLURM_STEP_NUM_TASKS", "7"},
      {"SLURM_STEP_NUM_NODES", "2"},
      {"SLURM_STEP_TASKS_PER_NODE", "4,3"},
      {"SLURM_STEP_NODELIST", "localhost,other"},
      {"SLURM_RESTART_COUNT", "2"},
      {"PATH", "/usr/bin:/bin"},
  }};
  auto o = parse({"--slurm-tasks", "/bin/true", "x"}, env);
  REQUIRE(o.slurm_tasks);
  std::map<std::string, std::string> vars(o.task_env.begin(), o.task_env.end());
  CHECK(vars["RANK"] == "5");
  CHECK(vars["LOCAL_RANK"] == "1");
  CHECK(vars["WORLD_SIZE"] == "7");
  CHECK(vars["LOCAL_WORLD_SIZE"] == "3");
  CHECK(vars["GROUP_RANK"] == "1");
  CHECK(vars["MASTER_ADDR"] == "localhost");
  CHECK(std::stoi(vars["MASTER_PORT"]) >= 20000);
  CHECK(vars["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK(vars["TORCHELASTIC_RUN_ID"] == "4242.0");
  CHECK(vars["ROLE_RANK"] == "5");
  CHECK(vars["GROUP_WORLD_SIZE"] == "2");
  // The agent's builder (agent/worker_env.h) makes the rest: NCCL error handling as under the
  // agent, and no error file, which nobody would read without an agent.
  CHECK(vars["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(vars["NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(vars["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  CHECK(vars.count("TORCHELASTIC_ERROR_FILE") == 0);
  CHECK(o.agent.worker_argv == std::vector<std::string>{"/bin/true", "x"});
  const auto again = parse({"--slurm-tasks", "/bin/true"}, env).task_env;
  std::map<std::string, std::string> same(again.begin(), again.end());
  CHECK(same["MASTER_PORT"] == vars["MASTER_PORT"]);
  // A first node that does not resolve: scontrol's NodeAddr (n1 -> 10.0.0.5).
  const auto via_scontrol = parse({"--slurm-tasks", "/bin/true"}, with(env, "SLURM_STEP_NODELIST", "n[1-2]")).task_env;
  CHECK(std::map<std::string, std::string>(via_scontrol.begin(), via_scontrol.end())["MASTER_ADDR"] == "10.0.0.5");
  CHECK_THROWS_WITH(parse({"--slurm-tasks", "--nproc-per-node", "2", "/bin/true"}, env), Catch::Contains("does not apply"));
  CHECK_THROWS_WITH(parse({"--slurm-tasks", "/bin/true"}, with(env, "SLURM_PROCID", "")), Catch::Contains("SLURM_PROCID is not set"));
  CHECK_THAT(*parse({"--slurm-tasks", "--print-config", "/bin/true"}, env).exit_now, Catch::Contains("task RANK = 5  (Slurm task)"));
}

TEST_CASE("host facts a launch does not need are never read", "[launch_plan]") {
  int address_reads = 0, gpu_reads = 0;
  HostFacts h = test_host();
  h.addresses = Lazy<std::vector<std::string>>::read_by([&] {
    ++address_reads;
    return std::vector<std::string>{"127.0.0.1", "10.0.0.5"};
  });
  h.gpus = Lazy<int>::read_by([&] {
    ++gpu_reads;
    return 2;
  });
  int topology_reads = 0;
  h.cpu_topology = Lazy<CpuTopology>::read_by([&] {
    ++topology_reads;
    return CpuTopology{};
  });
  plan({"--standalone", "--nproc-per-node", "4", "--no-python", "/bin/true"}, {}, h);
  CHECK(address_reads == 0);
  CHECK(gpu_reads == 0);
  CHECK(topology_reads == 0);
  // A c10d endpoint asks whether it is ours, "auto" counts GPUs: each read once.
  auto p = plan({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.5:29400", "--nproc-per-node",
                 "auto", "--no-python", "/bin/true"},
                {}, h);
  CHECK(p.nproc_per_node.value == 2);
  CHECK(address_reads == 1);
  CHECK(gpu_reads == 1);
  // A loopback endpoint is this host without listing its addresses.
  HostFacts h2 = test_host();
  int loopback_reads = 0;
  h2.addresses = Lazy<std::vector<std::string>>::read_by([&] {
    ++loopback_reads;
    return std::vector<std::string>{"127.0.0.1"};
  });
  auto lo = plan({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400", "--no-python", "/bin/true"}, {}, h2);
  CHECK(lo.multi_node->config.is_host);
  CHECK(loopback_reads == 0);
}

TEST_CASE("watchdogs: heartbeat timeouts from flags or PET_*, torch's file timer from its variables", "[launch_plan]") {
  auto off = plan({"--no-python", "/bin/true"});
  CHECK(off.heartbeat_timeout.value == std::chrono::milliseconds(0));
  CHECK(off.initial_heartbeat_timeout.value == std::chrono::milliseconds(0));
  CHECK_FALSE(off.file_timer.value);

  auto on = plan({"--heartbeat-timeout", "3", "--no-python", "/bin/true"},
                 EnvSnapshot{{{"PET_INITIAL_HEARTBEAT_TIMEOUT", "60.5"}, {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}});
  CHECK(on.heartbeat_timeout.value == std::chrono::milliseconds(3000));
  CHECK(on.heartbeat_timeout.source == "--heartbeat-timeout");
  CHECK(on.initial_heartbeat_timeout.value == std::chrono::milliseconds(60500));
  CHECK(on.initial_heartbeat_timeout.source == "PET_INITIAL_HEARTBEAT_TIMEOUT");
  REQUIRE(on.file_timer.value);
  CHECK(on.file_timer.value->empty());  // crun makes the FIFO
  auto agent = to_launch_options(on).agent;
  CHECK(agent.heartbeat_timeout == std::chrono::milliseconds(3000));
  CHECK(agent.initial_heartbeat_timeout == std::chrono::milliseconds(60500));
  CHECK(agent.file_timer == std::optional<std::string>(""));
  CHECK(agent.max_no_progress_restarts == 3);  // the default

  // The no-progress limit reaches the coordinator only when heartbeats measure progress.
  const std::vector<std::string> c10d{"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.5:29400",
                                      "--max-no-progress-restarts", "5"};
  auto with = c10d;
  with.insert(with.end(), {"--heartbeat-timeout", "10", "--no-python", "/bin/true"});
  auto without = c10d;
  without.insert(without.end(), {"--no-python", "/bin/true"});
  CHECK(parse(with).agent.multi_node->rendezvous.no_progress_limit == 5);
  CHECK(parse(without).agent.multi_node->rendezvous.no_progress_limit == 0);
  CHECK_THAT(usage_error({"--max-no-progress-restarts", "-2", "--no-python", "/bin/true"}),
             Catch::Contains("--max-no-progress-restarts"));

  auto named = plan({"--no-python", "/bin/true"},
                    EnvSnapshot{{{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/tmp/t.fifo"}}});
  CHECK(named.file_timer.value == std::optional<std::string>("/tmp/t.fifo"));
  CHECK(named.file_timer.source == "TORCHELASTIC_TIMER_FILE");
  // torch's rule: only "1" turns it on; the path alone does not.
  CHECK_FALSE(plan({"--no-python", "/bin/true"},
                   EnvSnapshot{{{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}, {"TORCHELASTIC_TIMER_FILE", "/tmp/t"}}})
                  .file_timer.value);

  CHECK_THAT(usage_error({"--heartbeat-timeout", "-1", "--no-python", "/bin/true"}),
             Catch::Contains("--heartbeat-timeout: expected seconds >= 0"));
  CHECK_THAT(usage_error({"--no-python", "/bin/true"}, EnvSnapshot{{{"PET_INITIAL_HEARTBEAT_TIMEOUT", "soon"}}}),
             Catch::Contains("PET_INITIAL_HEARTBEAT_TIMEOUT"));
}

TEST_CASE("which programs run how: ELF or #! runs itself, any other file runs under Python", "[launch_plan]") {
  const EnvSnapshot env{{{"PYTHON_EXEC", "/bin/sh"}}};
  char dir[] = "/tmp/crun-programs-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string d = dir;
  const auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = d + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(path.c_str(), mode);
    return path;
  };
  const std::string noext = write("noext", "print('hi')\n", 0755);          // Python, executable, no #!
  const std::string shebang = write("tool", "#!/bin/sh\nexit 0\n", 0755);
  const std::string elf_copy = d + "/true";
  {
    std::ifstream in("/bin/true", std::ios::binary);
    std::ofstream out(elf_copy, std::ios::binary);
    out << in.rdbuf();
  }
  ::chmod(elf_copy.c_str(), 0755);
  const std::string plain_sh = write("script", "#!/bin/sh\n", 0644);  // #! but not executable
  CHECK(parse({noext, "x"}, env).agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", noext, "x"});
  CHECK(parse({shebang, "x"}, env).agent.worker_argv == std::vector<std::string>{shebang, "x"});
  CHECK(parse({shebang}, env).agent.worker_program == shebang);
  CHECK(parse({elf_copy}, env).agent.worker_argv == std::vector<std::string>{elf_copy});
  CHECK_THAT(usage_error({plain_sh}, env), Catch::Contains("program not executable: " + plain_sh));
  // A bare name that is a file here is that file (torchrun's script is a path), not $PATH's.
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  REQUIRE(::chdir(dir) == 0);
  const auto local = parse({"true"}, env);  // ./true (a copy of /bin/true) here
  const auto local_py = parse({"noext"}, env);
  REQUIRE(::chdir(cwd) == 0);
  CHECK(local.agent.worker_program == "true");
  CHECK(local_py.agent.worker_argv == std::vector<std::string>{"/bin/sh", "-u", "noext"});
  for (const auto& f : {noext, shebang, elf_copy, plain_sh}) ::unlink(f.c_str());
  ::rmdir(dir);
}

TEST_CASE("c10d on port 0 hosts one node on a free port; several nodes cannot use it", "[launch_plan]") {
  const auto one = parse({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "/bin/true"});
  REQUIRE(one.agent.multi_node);
  CHECK(one.agent.multi_node->endpoint.port == 0);
  CHECK(one.agent.multi_node->is_host);
  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "/bin/true"}),
             Catch::Contains("port 0 (a free port) works only for one node"));
  CHECK_THAT(usage_error({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.9.9.9:0", "/bin/true"}),
             Catch::Contains("10.9.9.9 is not this host"));
}

TEST_CASE("etcd-v3: every member, TLS files, key prefix and lease TTL; c10d's host settings refused", "[launch_plan]") {
  char file[] = "/tmp/crun-pem-XXXXXX";
  const int fd = ::mkstemp(file);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string pem = file;
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_pem{pem};
  const auto e = parse({"--nnodes", "2:3", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "10.9.0.1,10.0.0.5:2391,node-b:2400",
                        "--rdzv-id", "j", "--rdzv-conf",
                        "protocol=https,cacert=" + pem + ",cert=" + pem + ",key=" + pem + ",key_prefix=/jobs/,lease_ttl=2,last_call_timeout=1",
                        "/bin/true"});
  REQUIRE(e.agent.multi_node);
  const auto& m = *e.agent.multi_node;
  CHECK(m.backend == MultiNodeConfig::Backend::kEtcdV3);
  REQUIRE(m.etcd.endpoints.size() == 3);
  CHECK(m.etcd.endpoints[0].str() == "10.9.0.1:2379");
  CHECK(m.etcd.endpoints[1].str() == "10.0.0.5:2391");
  CHECK(m.etcd.endpoints[2].str() == "node-b:2400");
  CHECK(m.etcd.first_endpoint == 1);  // the member on this host (10.0.0.5) first
  CHECK(m.etcd.tls);
  CHECK(m.etcd.cacert == pem);
  CHECK(m.etcd.key_prefix == "/jobs/");
  CHECK(m.etcd.lease_ttl == std::chrono::seconds(2));
  CHECK(m.rendezvous.last_call_timeout == std::chrono::milliseconds(1000));
  CHECK_FALSE(m.is_host);

  const auto bad = [](const std::string& conf, const std::string& endpoint = "h1") {
    return usage_error({"--nnodes", "2", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", endpoint, "--rdzv-conf", conf, "/bin/true"});
  };
  CHECK_THAT(bad("lease_ttl=1"), Catch::Contains("lease_ttl must be a whole number of seconds in [2, 86400]"));
  CHECK_THAT(bad("lease_ttl=2.5"), Catch::Contains("lease_ttl"));
  CHECK_THAT(bad("protocol=ftp"), Catch::Contains("protocol must be http or https"));
  CHECK_THAT(bad("protocol=https,cacert=" + pem + ".missing"), Catch::Contains("cacert must name a readable file"));
  CHECK_THAT(bad("cacert=" + pem), Catch::Contains("need protocol=https"));
  CHECK_THAT(bad("protocol=https,cert=" + pem), Catch::Contains("cert and key go together"));
  CHECK_THAT(bad("is_host=1"), Catch::Contains("is_host is a c10d setting"));
  CHECK_THAT(bad("token=x"), Catch::Contains("token is a c10d setting"));
  CHECK_THAT(bad("heartbeat_timeout=5"), Catch::Contains("use lease_ttl"));
  CHECK_THAT(bad("key_prefix="), Catch::Contains("key_prefix must not be empty"));
  CHECK_THAT(bad("", "h1,,h2"), Catch::Contains("an empty member"));
  CHECK_THAT(bad("", "h1:0"), Catch::Contains("port must not be 0"));
  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "etcd-v3", "/bin/true"}), Catch::Contains("--rdzv-endpoint: required for etcd-v3"));
  // etcd-v3's keys mean nothing to c10d.
  CHECK_THAT(usage_error({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--rdzv-conf", "lease_ttl=3", "/bin/true"}),
             Catch::Contains("unknown key 'lease_ttl'") && Catch::Contains("etcd-v3"));
  // Inside a Slurm step the endpoint Slurm implies is no etcd: it must be given.
  CHECK_THAT(usage_error({"--rdzv-backend", "etcd-v3", "/bin/true"}, kSlurmStep),
             Catch::Contains("--rdzv-endpoint: etcd-v3 needs the etcd members'"));
  const auto in_slurm = parse({"--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "10.9.0.1", "/bin/true"}, kSlurmStep);
  REQUIRE(in_slurm.agent.multi_node);
  CHECK(in_slurm.agent.multi_node->etcd.endpoints.at(0).str() == "10.9.0.1:2379");
  // PET_* as always; one node with an endpoint is still a rendezvous.
  const auto pet = parse({"/bin/true"}, EnvSnapshot{{{"PET_RDZV_BACKEND", "etcd-v3"}, {"PET_RDZV_ENDPOINT", "127.0.0.1:2379"}}});
  REQUIRE(pet.agent.multi_node);
  CHECK(pet.agent.multi_node->backend == MultiNodeConfig::Backend::kEtcdV3);
  CHECK(pet.agent.multi_node->etcd.first_endpoint == 0);
}

TEST_CASE("argparse habits: a repeated option takes its last value; --opt= is an empty value", "[launch_plan]") {
  REQUIRE(parse({"--nproc-per-node", "3", "--nproc-per-node", "2", "/bin/true"}).agent.nproc_per_node == 2);
  REQUIRE(parse({"--nproc_per_node=3", "--nproc-per-node", "4", "/bin/true"}).agent.nproc_per_node == 4);
  const auto twice = plan({"--role", "a", "--role=b", "-r", "1", "-r2", "--standalone", "--standalone", "/bin/true"});
  REQUIRE(twice.role.value == "b");
  REQUIRE(twice.redirects.value == std::vector<unsigned>{2});
  REQUIRE(twice.standalone.value);
  REQUIRE(source_of(twice, "redirects") == "--redirects");

  // `--opt=` never takes the next word: --no-python stays a flag, and an empty run id is refused.
  const std::string e = usage_error({"--rdzv-id=", "--no-python", "true"});
  CHECK(e == "--rdzv-id: must not be empty");
  CHECK(usage_error({"--master-addr=", "--no-python", "true"}) == "--master-addr: must not be empty");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"PET_RDZV_ID", " "}}}) == "--rdzv-id: must not be empty (from PET_RDZV_ID)");
  const auto empty_dir = plan({"--log-dir=", "--no-python", "true"});
  REQUIRE(empty_dir.log_dir.value.empty());
  REQUIRE(empty_dir.log_dir.source == "--log-dir");
  REQUIRE(empty_dir.worker_argv.source == "--no-python");
  // Empty where a value is required: the usual one-line error naming the flag.
  for (const char* flag : {"--nproc-per-node=", "--nnodes=", "--max-restarts=", "--role=", "--rdzv-backend=", "--stop-timeout="}) {
    const std::string err = usage_error({flag, "--no-python", "true"});
    INFO(flag << ": " << err);
    CHECK_THAT(err, Catch::StartsWith(std::string(flag).substr(0, std::string(flag).size() - 1)));
    CHECK(err.find('\n') == std::string::npos);
  }
  // After the program, words are the program's, `--x=` included.
  REQUIRE(plan({"/bin/echo", "--rdzv-id=", "x"}).worker_argv.value == std::vector<std::string>{"/bin/echo", "--rdzv-id=", "x"});
}

TEST_CASE("--log-dir: an existing file, or a path under one, is bad usage; a new directory is fine", "[launch_plan]") {
  char file[] = "/tmp/crun-log-dir-test-XXXXXX";
  const int fd = ::mkstemp(file);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string f = file;
  CHECK(usage_error({"--log-dir", f, "/bin/true"}) == "--log-dir: " + f + " is not a directory");
  CHECK(usage_error({"--log-dir", f + "/a/b", "/bin/true"}) == "--log-dir: " + f + " is not a directory");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"PET_LOG_DIR", f}}}) == "--log-dir: " + f + " is not a directory (from PET_LOG_DIR)");
  ::unlink(file);
  CHECK(plan({"--log-dir", f + "/a/b", "/bin/true"}).log_dir.value == f + "/a/b");  // made at launch
  CHECK(plan({"--log-dir", "/tmp", "/bin/true"}).log_dir.value == "/tmp");
  CHECK(plan({"--log-dir", "relative-logs", "/bin/true"}).log_dir.value == "relative-logs");
}

TEST_CASE("--shutdown-timeout is --stop-timeout: the last given wins, then PET_*, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "[launch_plan]") {
  using std::chrono::milliseconds;
  REQUIRE(plan({"/bin/true"}).stop_timeout.value == milliseconds(30000));
  auto p = plan({"--shutdown-timeout", "7", "/bin/true"});
  REQUIRE(p.stop_timeout.value == milliseconds(7000));
  REQUIRE(p.stop_timeout.source == "--shutdown-timeout");
  p = plan({"--stop-timeout", "5", "--shutdown_timeout", "7", "/bin/true"});
  REQUIRE(p.stop_timeout.value == milliseconds(7000));
  REQUIRE(p.stop_timeout.source == "--shutdown-timeout");
  p = plan({"--shutdown-timeout", "7", "--stop-timeout=5", "/bin/true"});
  REQUIRE(p.stop_timeout.value == milliseconds(5000));
  REQUIRE(p.stop_timeout.source == "--stop-timeout");

  const EnvSnapshot torch_env{{{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "9"}}};
  p = plan({"/bin/true"}, torch_env);
  REQUIRE(p.stop_timeout.value == milliseconds(9000));
  REQUIRE(p.stop_timeout.source == "TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  REQUIRE(plan({"/bin/true"}, with(torch_env, "PET_SHUTDOWN_TIMEOUT", "8")).stop_timeout.source == "PET_SHUTDOWN_TIMEOUT");
  REQUIRE(plan({"/bin/true"}, with(with(torch_env, "PET_SHUTDOWN_TIMEOUT", "8"), "PET_STOP_TIMEOUT", "6")).stop_timeout.value ==
          milliseconds(6000));
  REQUIRE(plan({"--shutdown-timeout", "2", "/bin/true"}, with(torch_env, "PET_STOP_TIMEOUT", "6")).stop_timeout.value ==
          milliseconds(2000));

  CHECK(usage_error({"--shutdown-timeout", "-1", "/bin/true"}) == "--shutdown-timeout: expected seconds >= 0");
  CHECK(usage_error({"/bin/true"}, with(torch_env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon")) ==
        "--stop-timeout: expected a number, got 'soon' (from TORCH_ELASTIC_SHUTDOWN_TIMEOUT)");
}

TEST_CASE("--virtual-local-rank: each worker's CUDA_VISIBLE_DEVICES as torch's agent maps it", "[launch_plan]") {
  REQUIRE(parse({"--nproc-per-node", "2", "/bin/true"}).agent.visible_devices.empty());
  REQUIRE(parse({"--nproc-per-node", "3", "--virtual-local-rank", "/bin/true"}).agent.visible_devices ==
          std::vector<std::string>{"0", "1", "2"});
  const EnvSnapshot cvd{{{"CUDA_VISIBLE_DEVICES", "4, 6,7"}}};
  REQUIRE(parse({"--nproc-per-node", "2", "--virtual_local_rank", "/bin/true"}, cvd).agent.visible_devices ==
          std::vector<std::string>{"4", "6"});
  REQUIRE(parse({"--nproc-per-node", "2", "/bin/true"}, with(cvd, "PET_VIRTUAL_LOCAL_RANK", "true")).agent.visible_devices ==
          std::vector<std::string>{"4", "6"});
  CHECK(usage_error({"--nproc-per-node", "4", "--virtual-local-rank", "/bin/true"}, cvd) ==
        "--virtual-local-rank: local rank 3 has no device in CUDA_VISIBLE_DEVICES=4, 6,7");
  // Set but empty hides every device: local rank 0 gets none, local rank 1 cannot start.
  REQUIRE(parse({"--virtual-local-rank", "/bin/true"}, EnvSnapshot{{{"CUDA_VISIBLE_DEVICES", ""}}}).agent.visible_devices ==
          std::vector<std::string>{""});
  CHECK_THAT(usage_error({"--nproc-per-node", "2", "--virtual-local-rank", "/bin/true"}, EnvSnapshot{{{"CUDA_VISIBLE_DEVICES", ""}}}),
             Catch::StartsWith("--virtual-local-rank: local rank 1"));
}

TEST_CASE("--event-log-handler: torch's handlers and jsonl:PATH; anything else is refused, never ignored", "[launch_plan]") {
  REQUIRE(source_of(plan({"--event-log-handler", "console", "/bin/true"}), "event_log_handler") == "--event-log-handler");
  REQUIRE(source_of(plan({"--event_log_handler=null", "/bin/true"}), "event_log_handler") == "--event-log-handler");
  CHECK(usage_error({"--event-log-handler", "scuba", "/bin/true"}) ==
        "--event-log-handler: expected null, console, dynamic_rendezvous or jsonl:PATH, got 'scuba'");
  CHECK(usage_error({"--event-log-handler", "jsonl:", "/bin/true"}) ==
        "--event-log-handler: jsonl: needs a path (jsonl:/path/events.jsonl)");
  CHECK(source_of(plan({"--event-log-handler", "dynamic_rendezvous", "/bin/true"}), "event_log_handler") == "--event-log-handler");
  CHECK(parse({"--event-log-handler", "jsonl:/tmp/e.jsonl", "/bin/true"}).agent.event_log_handler == "jsonl:/tmp/e.jsonl");
  CHECK(parse({"/bin/true"}, EnvSnapshot{{{"PET_EVENT_LOG_HANDLER", "console"}}}).agent.event_log_handler == "console");
  CHECK(parse({"/bin/true"}).agent.event_log_handler == "null");
}

TEST_CASE("--health-check-port: off by default; flag, PET_*, then torch's TORCHELASTIC_HEALTH_CHECK_PORT", "[launch_plan]") {
  CHECK_FALSE(parse({"/bin/true"}).agent.health_check_port.has_value());
  CHECK(parse({"/bin/true"}).agent.health_check_addr == "127.0.0.1");
  const auto flag = plan({"--health-check-port", "8080", "--health_check_addr", "0.0.0.0", "/bin/true"});
  CHECK(flag.health_check_port.value == std::optional<std::uint16_t>(8080));
  CHECK(flag.health_check_addr.value == "0.0.0.0");
  CHECK(source_of(flag, "health_check_port") == "--health-check-port");
  const auto torch = plan({"/bin/true"}, EnvSnapshot{{{"TORCHELASTIC_HEALTH_CHECK_PORT", "9000"}}});
  CHECK(torch.health_check_port.value == std::optional<std::uint16_t>(9000));
  CHECK(torch.health_check_port.source == "TORCHELASTIC_HEALTH_CHECK_PORT");
  const auto pet = plan({"/bin/true"}, EnvSnapshot{{{"TORCHELASTIC_HEALTH_CHECK_PORT", "9000"}, {"PET_HEALTH_CHECK_PORT", "9100"}}});
  CHECK(pet.health_check_port.value == std::optional<std::uint16_t>(9100));
  CHECK(parse({"--health-check-port", "0", "/bin/true"}).agent.health_check_port == std::optional<std::uint16_t>(0));
  CHECK(parse({"--health-check-addr", "::1", "--health-check-port", "1", "/bin/true"}).agent.health_check_addr == "::1");
  CHECK(usage_error({"--health-check-port", "http", "/bin/true"}) == "--health-check-port: expected a port 0-65535, got 'http'");
  CHECK(usage_error({"--health-check-port", "65536", "/bin/true"}) == "--health-check-port: expected a port 0-65535, got '65536'");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"TORCHELASTIC_HEALTH_CHECK_PORT", "-1"}}}) ==
        "--health-check-port: expected a port 0-65535, got '-1' (from TORCHELASTIC_HEALTH_CHECK_PORT)");
  CHECK(usage_error({"--health-check-addr", "localhost", "/bin/true"}) ==
        "--health-check-addr: expected an IP address (127.0.0.1, 0.0.0.0, ::), got 'localhost'");
  CHECK_THAT(parse({"--health-check-port", "8080", "--print-config", "/bin/true"}).exit_now.value_or(""),
             Catch::Contains("http://127.0.0.1:8080/"));
}

TEST_CASE("torchrun 2.x flags crun does not implement yet are refused, never ignored", "[launch_plan]") {
  CHECK(plan({"--duplicate-stdout-filters=", "--duplicate_stderr_filters", "", "/bin/true"}).duplicate_stdout_filters.value.empty());
  const auto filtered = plan({"--duplicate-stdout-filters", "apple,orange", "/bin/true"},
                             EnvSnapshot{{{"PET_DUPLICATE_STDERR_FILTERS", "x,,y,"}}});
  CHECK(filtered.duplicate_stdout_filters.value == std::vector<std::string>{"apple", "orange"});
  CHECK(filtered.duplicate_stderr_filters.value == std::vector<std::string>{"x,y"});  // ",," is a comma
  CHECK(filtered.duplicate_stderr_filters.source == "PET_DUPLICATE_STDERR_FILTERS");
  CHECK(split_filters(",a,,,b,,") == std::vector<std::string>{"a,", "b,"});
  CHECK(split_filters(",,,") == std::vector<std::string>{","});
  CHECK(split_filters(",").empty());
  for (const char* mode : {"node", "socket", "exclusive", "core-complex"}) {
    CHECK(usage_error({"--numa-binding", mode, "/bin/true"}) ==
          "--numa-binding: no NVIDIA GPU found (each local rank is bound near the GPU of its index)");
  }
  CHECK(usage_error({"--slurm-tasks", "--numa-binding", "node", "/bin/true"}) ==
        "--slurm-tasks: --numa-binding does not apply (srun starts every worker; there is no agent)");
  CHECK(usage_error({"--numa_binding", "die", "/bin/true"}) ==
        "--numa-binding: expected node, socket, exclusive or core-complex, got 'die'");
  // torch's --numa-binding and --logs-specs have no action=env: their PET_ variables are not read.
  const auto no_pet = plan({"/bin/true"}, EnvSnapshot{{{"PET_NUMA_BINDING", "node"}, {"PET_LOGS_SPECS", "x"}}});
  CHECK(source_of(no_pet, "numa_binding") == "default");
  CHECK(source_of(no_pet, "logs_specs") == "default");
}

TEST_CASE("--numa-binding: each local rank's CPUs near the GPU of its index, shown by --print-config", "[launch_plan]") {
  HostFacts h = test_host();
  CpuTopology t;
  for (int id = 0; id < 8; ++id) {
    t.cpus.push_back({id, id / 4, id / 4, id, id - id % 2});
    t.allowed.push_back(id);
  }
  t.gpu_nodes = {0, 1};
  h.cpu_topology = t;
  const auto p = plan({"--nproc-per-node", "2", "--numa-binding", "node", "/bin/true"}, {}, h);
  CHECK(p.worker_cpus.value == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(p.worker_cpus.source == "--numa-binding");
  CHECK(print_plan(p).find("worker_cpus = 0:0-3 1:4-7  (--numa-binding)") != std::string::npos);
  const auto swapped = plan({"--nproc-per-node", "2", "--numa-binding", "exclusive", "/bin/true"},
                            EnvSnapshot{{{"CUDA_VISIBLE_DEVICES", "1,0"}}}, h);
  CHECK(swapped.worker_cpus.value == std::vector<std::vector<int>>{{4, 5, 6, 7}, {0, 1, 2, 3}});
  CHECK(plan({"/bin/true"}, {}, h).worker_cpus.value.empty());
  CHECK(print_plan(plan({"/bin/true"}, {}, h)).find("worker_cpus") == std::string::npos);
  CHECK(usage_error({"--nproc-per-node", "3", "--numa-binding", "socket", "/bin/true"}, {}, h) ==
        "--numa-binding: local rank 2 has no GPU (2 visible)");
}

TEST_CASE("settings crun reads from its environment alone reach the agent, shown by --print-config with their source",
          "[launch_plan]") {
  HostFacts h = test_host();
  h.writable_dir = [](const std::string& dir) { return dir == "/run/user/7" || dir == "/dev/shm"; };

  // Unset: the defaults, and a temporary run dir in a writable tmpfs.
  const auto quiet = plan({"--standalone", "--rdzv-id", "r1", "/bin/true"}, EnvSnapshot{{{"PATH", "/bin"}}}, h);
  const auto d = to_launch_options(quiet).agent;
  CHECK(d.temp_dir == "/dev/shm");
  CHECK(d.launcher_error_file.empty());
  CHECK(d.job_cgroup);
  const std::string quiet_text = print_plan(quiet);
  CHECK_THAT(quiet_text, Catch::Contains("run_dir = /dev/shm/crun-r1-XXXXXX, removed at exit  (/dev/shm: a tmpfs)"));
  CHECK_THAT(quiet_text, Catch::Contains("error_file = none  (default)"));
  CHECK_THAT(quiet_text, Catch::Contains("job_cgroup = on (where cgroup v2 allows one)  (default)"));
  CHECK_THAT(quiet_text, Catch::Contains("log_line_prefix = [${role_name}${local_rank}]: (torch's)  (default)"));

  const EnvSnapshot env{{{"PATH", "/nonexistent:/bin"},
                         {"XDG_RUNTIME_DIR", "/run/user/7"},
                         {"TORCHELASTIC_ERROR_FILE", "/jobs/7/error.json"},
                         {"CRUN_NO_CGROUP", "1"},
                         {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${rank}>"}}};
  const auto p = plan({"--standalone", "--rdzv-id", "r1", "true"}, env, h);
  const auto a = to_launch_options(p).agent;
  CHECK(a.temp_dir == "/run/user/7");
  CHECK(a.launcher_error_file == "/jobs/7/error.json");
  CHECK_FALSE(a.job_cgroup);
  CHECK(a.worker_program == "/bin/true");  // looked up in the environment's PATH
  CHECK(a.log_line_prefix_template == "${rank}>");
  const std::string text = print_plan(p);
  CHECK_THAT(text, Catch::Contains("run_dir = /run/user/7/crun-r1-XXXXXX, removed at exit  (XDG_RUNTIME_DIR)"));
  CHECK_THAT(text, Catch::Contains("error_file = /jobs/7/error.json  (TORCHELASTIC_ERROR_FILE)"));
  CHECK_THAT(text, Catch::Contains("job_cgroup = off (process groups)  (CRUN_NO_CGROUP)"));
  CHECK_THAT(text, Catch::Contains("executable = /bin/true  (PATH)"));
  CHECK_THAT(text, Catch::Contains("log_line_prefix = ${rank}>  (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"));
  CHECK(usage_error({"--no-python", "true"}, EnvSnapshot{{{"PATH", "/nonexistent"}}}, h) ==
        "program not found or not executable: true");

  // TMPDIR is the user's choice; logs kept in the run dir keep it off a tmpfs.
  const auto tmpdir = plan({"--standalone", "--rdzv-id", "r1", "/bin/true"}, with(env, "TMPDIR", "/scratch"), h);
  CHECK_THAT(print_plan(tmpdir), Catch::Contains("run_dir = /scratch/crun-r1-XXXXXX, removed at exit  (TMPDIR)"));
  const auto logs = plan({"--standalone", "--rdzv-id", "r1", "--tee", "3", "/bin/true"}, env, h);
  CHECK_THAT(print_plan(logs), Catch::Contains("run_dir = /tmp/crun-r1-XXXXXX, kept: it holds the logs  (default)"));
  CHECK(to_launch_options(plan({"/bin/true"}, with(env, "CRUN_NO_CGROUP", "0"), h)).agent.job_cgroup);

  // The agents' store: CRUN_STORE_TCP_ONLY=1 keeps it and its clients off the local socket.
  const std::vector<std::string> multi = {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.5:29400", "/bin/true"};
  const auto tcp = plan(multi, EnvSnapshot{{{"CRUN_STORE_TCP_ONLY", "1"}}}, h);
  REQUIRE(tcp.multi_node);
  CHECK_FALSE(tcp.multi_node->config.store_local_socket);
  CHECK_THAT(print_plan(tcp), Catch::Contains("store_local_socket = off (TCP alone)  (CRUN_STORE_TCP_ONLY)"));
  const auto local = plan(multi, {}, h);
  CHECK(local.multi_node->config.store_local_socket);
  CHECK_THAT(print_plan(local), Catch::Contains("store_local_socket = on (this host's clients reach the store through its local socket)  (default)"));
}

TEST_CASE("--standby-workers and --standby-preload: Python programs only, one notice otherwise", "[launch_plan]") {
  const EnvSnapshot py{{{"PYTHON_EXEC", "/bin/sh"}}};
  auto off = plan({"-m", "pkg.train"}, py);
  CHECK_FALSE(off.standby_workers.value);
  CHECK(off.standby_preload.value == std::vector<std::string>{"torch"});
  CHECK_FALSE(parse({"-m", "pkg.train"}, py).agent.standby_workers);

  auto on = plan({"--standby-workers", "--standby-preload", " torch , numpy.linalg,,", "-m", "pkg.train"}, py);
  CHECK(on.standby_workers.value);
  CHECK(on.standby_workers.source == "--standby-workers");
  CHECK(on.standby_preload.value == std::vector<std::string>{"torch", "numpy.linalg"});
  CHECK(on.note.empty());
  const auto agent = to_launch_options(on).agent;
  CHECK(agent.standby_workers);
  CHECK(agent.standby_preload == std::vector<std::string>{"torch", "numpy.linalg"});

  const EnvSnapshot pet{{{"PYTHON_EXEC", "/bin/sh"}, {"PET_STANDBY_WORKERS", "1"}, {"PET_STANDBY_PRELOAD", "json"}}};
  auto from_env = plan({"-m", "pkg.train"}, pet);
  CHECK(from_env.standby_workers.value);
  CHECK(from_env.standby_workers.source == "PET_STANDBY_WORKERS");
  CHECK(from_env.standby_preload.value == std::vector<std::string>{"json"});
  CHECK_THAT(*parse({"--print-config", "-m", "pkg.train"}, pet).exit_now,
             Catch::Contains("standby = on, preload json  (PET_STANDBY_WORKERS)"));

  // A cluster may set PET_STANDBY_WORKERS for every job: a program Python does not run starts cold.
  auto native = plan({"--no-python", "/bin/true"}, pet);
  CHECK_FALSE(native.standby_workers.value);
  CHECK(native.standby_workers.source == "PET_STANDBY_WORKERS, not a Python program");
  CHECK(native.note ==
        "crun: PET_STANDBY_WORKERS: standby workers are for Python programs; /bin/true starts cold at every restart");
  CHECK_FALSE(to_launch_options(native).agent.standby_workers);
  CHECK_THAT(*parse({"--print-config", "--standby-workers", "/bin/true"}).exit_now,
             Catch::Contains("standby = off  (--standby-workers, not a Python program)"));

  CHECK(usage_error({"--standby-preload", "torch,2bad", "-m", "pkg"}, py) ==
        "--standby-preload: '2bad' is not a Python module name");
  CHECK_THAT(usage_error({"-m", "pkg"}, EnvSnapshot{{{"PYTHON_EXEC", "/bin/sh"}, {"PET_STANDBY_PRELOAD", "a-b"}}}),
             Catch::Contains("'a-b' is not a Python module name (from PET_STANDBY_PRELOAD)"));
  CHECK_THAT(usage_error({"-m", "pkg"}, EnvSnapshot{{{"PYTHON_EXEC", "/bin/sh"}, {"PET_STANDBY_WORKERS", "maybe"}}}),
             Catch::Contains("PET_STANDBY_WORKERS"));
}

TEST_CASE("CRUN_STATE_ROOT and --state-max-bytes reach the agent; a bad value is one line", "[launch_plan]") {
  const HostFacts h = test_host();
  const auto d = plan({"--standalone", "--rdzv-id", "r1", "/bin/true"}, {}, h);
  CHECK(to_launch_options(d).agent.state_root == "/dev/shm");
  CHECK(to_launch_options(d).agent.state_max_bytes == (std::uint64_t{1} << 30));
  CHECK_THAT(print_plan(d), Catch::Contains("state_dir = /dev/shm/crun-state-r1-<agent pid>/rank-<rank>, removed at exit  (default)"));
  CHECK_THAT(print_plan(d), Catch::Contains("state_max_bytes = 1073741824 per rank  (default)"));

  const auto p = plan({"--standalone", "--rdzv-id", "r1", "--state-max-bytes", "256MiB", "/bin/true"},
                      EnvSnapshot{{{"CRUN_STATE_ROOT", "/mnt/ram"}}}, h);
  CHECK(to_launch_options(p).agent.state_root == "/mnt/ram");
  CHECK(to_launch_options(p).agent.state_max_bytes == (std::uint64_t{256} << 20));
  CHECK_THAT(print_plan(p), Catch::Contains("state_dir = /mnt/ram/crun-state-r1-<agent pid>/rank-<rank>, removed at exit  (CRUN_STATE_ROOT)"));
  CHECK(to_launch_options(plan({"/bin/true"}, EnvSnapshot{{{"PET_STATE_MAX_BYTES", "2k"}}}, h)).agent.state_max_bytes == 2048);

  CHECK(usage_error({"--state-max-bytes", "lots", "/bin/true"}, {}, h) ==
        "--state-max-bytes: expected a size > 0 such as 256MiB, 1GiB or a number of bytes, got 'lots'");
  CHECK(usage_error({"--state-max-bytes=0", "/bin/true"}, {}, h) ==
        "--state-max-bytes: expected a size > 0 such as 256MiB, 1GiB or a number of bytes, got '0'");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"PET_STATE_MAX_BYTES", "-1"}}}, h) ==
        "PET_STATE_MAX_BYTES: expected a size > 0 such as 256MiB, 1GiB or a number of bytes, got '-1'");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"CRUN_STATE_ROOT", "shm"}}}, h) ==
        "CRUN_STATE_ROOT: expected an absolute path, got 'shm'");
}

TEST_CASE("--exclude-after and --exclude-cooldown reach the rendezvous; bad values are one line", "[launch_plan]") {
  const std::vector<std::string> c10d{"--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.5:29400"};
  auto defaults = c10d;
  defaults.insert(defaults.end(), {"--no-python", "/bin/true"});
  const auto d = parse(defaults).agent.multi_node->rendezvous;
  CHECK(d.exclude_after == 2);
  CHECK(d.exclude_cooldown == std::chrono::milliseconds(600000));

  auto given = c10d;
  given.insert(given.end(), {"--exclude-after", "0", "--no-python", "/bin/true"});
  const auto g = parse(given, EnvSnapshot{{{"PET_EXCLUDE_COOLDOWN", "2.5"}}}).agent.multi_node->rendezvous;
  CHECK(g.exclude_after == 0);
  CHECK(g.exclude_cooldown == std::chrono::milliseconds(2500));
  auto print = c10d;
  print.insert(print.end(), {"--exclude-after", "3", "--print-config", "/bin/true"});
  const std::string printed = *parse(print).exit_now;
  CHECK_THAT(printed, Catch::Contains("exclude_after = 3  (--exclude-after)") &&
                          Catch::Contains("exclude_cooldown = 600  (default)"));

  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--exclude-after", "-1"}, {"--exclude-after", "two"}, {"--exclude-cooldown", "0"},
           {"--exclude-cooldown", "-5"}, {"--exclude-cooldown", "soon"}, {"--exclude-cooldown", "1e12"}}) {
    auto bad = c10d;
    bad.insert(bad.end(), {flag, value, "--no-python", "/bin/true"});
    const std::string error = usage_error(bad);
    INFO(flag << " " << value << ": " << error);
    CHECK_THAT(error, Catch::Contains(flag));
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("node checks: repeatable flags and PET_NODE_CHECK reach the agent; a bad value is one line", "[launch_plan]") {
  const HostFacts h = test_host();
  const auto d = to_launch_options(plan({"--standalone", "/bin/true"}, {}, h)).agent.node_checks;
  CHECK(d.commands.empty());
  CHECK(d.disabled.empty());
  CHECK(d.timeout == std::chrono::seconds(30));
  CHECK(d.interval == std::chrono::seconds(10));
  CHECK(d.min_free == (std::uint64_t{16} << 20));

  const auto p = plan({"--standalone", "--node-check", "sh -c 'exit 0'", "--node-check=/opt/check --gpu", "--no-node-check",
                       "disk", "--no_node_check", "gpu", "--node-check-timeout", "2.5", "--node-check-interval", "0.5",
                       "--node-check-path", "/scratch", "--node-check-path", "/data", "--node-check-min-free", "1G", "/bin/true"},
                      {}, h);
  const NodeCheckSettings& c = to_launch_options(p).agent.node_checks;
  CHECK(c.commands == std::vector<std::string>{"sh -c 'exit 0'", "/opt/check --gpu"});
  CHECK(c.disabled == std::set<std::string>{"disk", "gpu"});
  CHECK(c.timeout == std::chrono::milliseconds(2500));
  CHECK(c.interval == std::chrono::milliseconds(500));
  CHECK(c.paths == std::vector<std::string>{"/scratch", "/data"});
  CHECK(c.min_free == (std::uint64_t{1} << 30));
  CHECK_THAT(print_plan(p), Catch::Contains("node_check = sh -c 'exit 0'; /opt/check --gpu  (--node-check)"));
  CHECK_THAT(print_plan(p), Catch::Contains("node_checks = disk off,net,gpu off; commands: sh -c 'exit 0'; /opt/check --gpu"));
  CHECK(to_launch_options(plan({"/bin/true"}, EnvSnapshot{{{"PET_NODE_CHECK", "/opt/check -q"}}}, h)).agent.node_checks.commands ==
        std::vector<std::string>{"/opt/check -q"});

  CHECK(usage_error({"--no-node-check", "cpu", "/bin/true"}, {}, h) ==
        "--no-node-check: unknown check 'cpu' (built-in checks: disk, net, gpu)");
  CHECK(usage_error({"--node-check", "check 'x", "/bin/true"}, {}, h) == "--node-check: unbalanced ' in 'check 'x'");
  CHECK(usage_error({"--node-check", " ", "--node-check", "", "/bin/true"}, {}, h).empty());  // blank: none
  CHECK(usage_error({"--node-check-timeout", "0", "/bin/true"}, {}, h) == "--node-check-timeout: expected seconds > 0, got '0'");
  CHECK(usage_error({"--node-check-interval", "soon", "/bin/true"}, {}, h) ==
        "--node-check-interval: expected a number, got 'soon' (from --node-check-interval)");
  CHECK(usage_error({"--node-check-min-free", "lots", "/bin/true"}, {}, h) ==
        "--node-check-min-free: expected a size such as 100M or 1G, got 'lots'");
  CHECK(usage_error({"/bin/true"}, EnvSnapshot{{{"PET_NODE_CHECK_TIMEOUT", "-1"}}}, h) ==
        "PET_NODE_CHECK_TIMEOUT: expected seconds > 0, got '-1'");
}

TEST_CASE("--precheck and --precheck-slowdown reach the agent; PET_PRECHECK; bad values are one line", "[launch_plan]") {
  const auto off = parse({"--standalone", "--no-python", "/bin/true"}).agent;
  CHECK_FALSE(off.precheck);
  CHECK(off.precheck_slowdown == 2.0);
  const auto on = parse({"--standalone", "--precheck", "--precheck-slowdown", "1.5", "--no-python", "/bin/true"}).agent;
  CHECK(on.precheck);
  CHECK(on.precheck_slowdown == 1.5);
  CHECK(parse({"--standalone", "--no-python", "/bin/true"}, EnvSnapshot{{{"PET_PRECHECK", "1"}}}).agent.precheck);
  const std::string printed = *parse({"--standalone", "--precheck", "--print-config", "/bin/true"}).exit_now;
  CHECK_THAT(printed, Catch::Contains("precheck = on, slow above 2x the nodes' median  (--precheck)"));
  for (const std::string value : {"1", "0.5", "-2", "fast", "1e9"}) {
    const std::string error = usage_error({"--standalone", "--precheck", "--precheck-slowdown", value, "--no-python", "/bin/true"});
    INFO(value << ": " << error);
    CHECK_THAT(error, Catch::Contains("--precheck-slowdown"));
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("--collapse-logs and --collapse-window reach the agent; PET_*; bad values are one line", "[launch_plan]") {
  const auto off = parse({"--standalone", "--no-python", "/bin/true"}).agent;
  CHECK_FALSE(off.collapse_logs);
  CHECK(off.collapse_window == std::chrono::milliseconds(200));
  const auto on = parse({"--standalone", "--collapse-logs", "--collapse-window", "0.05", "--no-python", "/bin/true"}).agent;
  CHECK(on.collapse_logs);
  CHECK(on.collapse_window == std::chrono::milliseconds(50));
  const EnvSnapshot pet{{{"PET_COLLAPSE_LOGS", "true"}, {"PET_COLLAPSE_WINDOW", "1.5"}}};
  const auto from_env = plan({"--standalone", "--no-python", "/bin/true"}, pet);
  CHECK(from_env.collapse_logs.value);
  CHECK(from_env.collapse_logs.source == "PET_COLLAPSE_LOGS");
  CHECK(from_env.collapse_window.value == std::chrono::milliseconds(1500));
  CHECK_THAT(*parse({"--print-config", "/bin/true"}, pet).exit_now, Catch::Contains("collapse_logs = 1  (PET_COLLAPSE_LOGS)"));
  for (const std::string value : {"0", "-1", "61", "soon", ""}) {
    const std::string error = usage_error({"--collapse-logs", "--collapse-window", value, "--no-python", "/bin/true"});
    INFO(value << ": " << error);
    CHECK_THAT(error, Catch::Contains("--collapse-window"));
    CHECK(error.find('\n') == std::string::npos);
  }
  CHECK(usage_error({"--no-python", "/bin/true"}, EnvSnapshot{{{"PET_COLLAPSE_LOGS", "sometimes"}}}) ==
        "PET_COLLAPSE_LOGS: expected true or false, got 'sometimes'");
  CHECK(usage_error({"--no-python", "/bin/true"}, EnvSnapshot{{{"PET_COLLAPSE_WINDOW", "0"}}}) ==
        "--collapse-window: expected seconds > 0 (at most 60), got '0' (from PET_COLLAPSE_WINDOW)");
}

TEST_CASE("--capture-timeout and --no-python-stacks: the bound on stacks before a kill, and Python's opt-out", "[launch_plan]") {
  using std::chrono::milliseconds;
  auto p = plan({"/bin/true"});
  CHECK(p.capture_timeout.value == milliseconds(5000));
  CHECK(p.python_stacks.value);
  p = plan({"--capture-timeout", "0.5", "--no-python-stacks", "/bin/true"});
  CHECK(p.capture_timeout.value == milliseconds(500));
  CHECK_FALSE(p.python_stacks.value);
  p = plan({"/bin/true"}, EnvSnapshot{{{"PET_CAPTURE_TIMEOUT", "0"}, {"PET_NO_PYTHON_STACKS", "1"}}});
  CHECK(p.capture_timeout.value == milliseconds(0));
  CHECK(p.capture_timeout.source == "PET_CAPTURE_TIMEOUT");
  CHECK_FALSE(p.python_stacks.value);
  CHECK(parse({"--capture_timeout", "2", "/bin/true"}).agent.capture_timeout == milliseconds(2000));
  CHECK(usage_error({"--capture-timeout", "-1", "/bin/true"}) == "--capture-timeout: expected seconds from 0 (off) to 3600");
  CHECK(usage_error({"--capture-timeout", "soon", "/bin/true"}) == "--capture-timeout: expected a number, got 'soon' (from --capture-timeout)");
}
