#include "launcher/launch_plan.h"

#include "base/random_bits.h"
#include "launcher/agent_settings.h"
#include "launcher/command_line.h"
#include "launcher/console_settings.h"
#include "launcher/job_environment.h"
#include "launcher/node_check_options.h"
#include "launcher/option_values.h"
#include "launcher/setting_sources.h"
#include "launcher/operator_settings.h"
#include "launcher/slurm_tasks.h"
#include "launcher/standby_settings.h"
#include "launcher/timeout_order.h"
#include "launcher/torch2_settings.h"
#include "launcher/worker_settings.h"

namespace crun {
namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

// "N" or "MIN:MAX" -> (min, max)
NodeRange parse_nnodes(const std::string& text) {
  const auto parts = split(text, ':');
  const auto lo = parse_long(parts[0]);
  const auto hi = parts.size() == 2 ? parse_long(parts[1]) : lo;
  if (parts.size() > 2 || !lo || !hi || *lo < 1 || *hi < *lo || *hi > 1000000) {
    usage("--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got '" + text + "'");
  }
  return {static_cast<int>(*lo), static_cast<int>(*hi)};
}

RendezvousBackend parse_backend(const std::string& text) {
  if (text == "static") return RendezvousBackend::kStatic;
  if (text == "c10d") return RendezvousBackend::kC10d;
  if (text == "etcd-v3") return RendezvousBackend::kEtcdV3;
  if (text == "etcd" || text == "etcd-v2") {
    usage("--rdzv-backend " + text + ": etcd's v2 API is not supported (etcd 3.6 removed it); use etcd-v3");
  }
  usage("--rdzv-backend: expected static, c10d or etcd-v3, got '" + text + "'");
}

// KEY=VALUE,... -> the pairs, blanks around keys and values dropped, empty items skipped.
std::vector<std::pair<std::string, std::string>> parse_rdzv_conf(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& item : split(text, ',')) {
    if (trim(item).empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) usage("--rdzv-conf: expected KEY=VALUE,..., got '" + text + "'");
    out.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
  }
  return out;
}

std::string random_run_id() {
  const std::uint64_t bits[2] = {random_bits(), random_bits()};
  std::string id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id.push_back('-');
    id.push_back("0123456789abcdef"[(bits[i / 16] >> (4 * (i % 16))) & 15]);
  }
  return id;
}

// --exclude-after N (an integer >= 0) and --exclude-cooldown SECONDS (> 0, at most a year).
void plan_exclusion(const SettingTexts& s, RendezvousFlags& rf) {
  const int after = int_setting(s, "exclude_after", "--exclude-after");
  if (after < 0) usage("--exclude-after: must be >= 0 (0: never), got " + std::to_string(after));
  const double cooldown = number_setting(s, "exclude_cooldown", "--exclude-cooldown");
  if (!(cooldown >= 0.001) || cooldown > 31536000) usage("--exclude-cooldown: expected seconds > 0 (at most a year)");
  rf.exclude_after = after;
  rf.exclude_cooldown = std::chrono::milliseconds(static_cast<long long>(cooldown * 1000.0));
}

// --precheck and --precheck-slowdown X (a number > 1, at most 1000).
void plan_precheck(const SettingTexts& s, LaunchPlan& plan) {
  plan.precheck = {s.at("precheck").value == "1", s.at("precheck").source};
  const double slowdown = number_setting(s, "precheck_slowdown", "--precheck-slowdown");
  if (!(slowdown > 1.0) || slowdown > 1000) usage("--precheck-slowdown: expected a number > 1 (at most 1000)");
  plan.precheck_slowdown = {slowdown, s.at("precheck_slowdown").source};
}

// The rendezvous group: nnodes, rdzv_*, node_rank, master_addr/port, local_addr; the job's shape
// and who hosts the store.
void plan_rendezvous(SettingTexts& s, const JobEnvironment& job, const std::vector<std::string>& program,
                     const EnvSnapshot& env, const HostFacts& host, int max_restarts, LaunchPlan& plan) {
  plan.standalone = {s.at("standalone").value == "1", s.at("standalone").source};
  plan.nnodes = {parse_setting(s.at("nnodes"), parse_nnodes), s.at("nnodes").source};
  plan.rdzv_backend = {parse_setting(s.at("rdzv_backend"), parse_backend), s.at("rdzv_backend").source};
  const auto conf = parse_setting(s.at("rdzv_conf"), parse_rdzv_conf);
  const int node_rank = int_setting(s, "node_rank", "--node-rank");
  const int master_port = int_setting(s, "master_port", "--master-port");
  if (s.given("master_port") && (master_port < 0 || master_port > 65535)) {
    usage("--master-port: expected 0-65535, got " + std::to_string(master_port));
  }
  auto& endpoint = s.by_key.at("rdzv_endpoint");
  if (!endpoint.value.empty() && (endpoint.value.front() == ':' || trim(endpoint.value).empty())) {
    usage("--rdzv-endpoint: expected HOST[:PORT], got '" + endpoint.value + "'");
  }

  RendezvousFlags rf;
  // Slurm names the rendezvous host by its node name; reach it by an address Slurm knows. Node 0
  // hosts the store.
  if (job.kind == "slurm" && s.from_job.count("rdzv_endpoint") && !job.first_node.empty()) {
    try {
      const std::string addr = slurm_node_address(job.first_node, host);
      if (addr != job.first_node) {
        endpoint.value = addr + endpoint.value.substr(job.first_node.size());
        endpoint.source += ", " + job.first_node + "'s NodeAddr from scontrol";
      }
    } catch (const std::runtime_error& e) {
      usage(e.what());
    }
    if (s.from_job.count("node_rank")) rf.is_host = Sourced<bool>{node_rank == 0, "SLURM_NODEID"};
  }

  const NodeRange nodes = plan.nnodes.value;
  rf.standalone = plan.standalone.value;
  rf.min_nodes = nodes.min;
  rf.max_nodes = nodes.max;
  rf.backend = plan.rdzv_backend.value;
  // Asked for by the user (flag or PET_*), not only a platform's or the default.
  rf.static_asked = s.given("rdzv_backend") && s.from_job.count("rdzv_backend") == 0;
  rf.endpoint = trim(endpoint.value);
  rf.endpoint_source = endpoint.source;
  // Slurm's endpoint is where an agent would host crun's store, not where etcd is.
  if (rf.backend == RendezvousBackend::kEtcdV3 && s.from_job.count("rdzv_endpoint")) {
    usage("--rdzv-endpoint: etcd-v3 needs the etcd members' HOST:PORT list (" + endpoint.source + " names no etcd)");
  }
  parse_setting(s.at("rdzv_id"), [](const std::string& t) {
    if (trim(t).empty()) usage("--rdzv-id: must not be empty");
    return 0;
  });
  if (s.at("master_addr").source == "--master-addr" && trim(s.at("master_addr").value).empty()) {
    usage("--master-addr: must not be empty");
  }
  rf.run_id = s.at("rdzv_id").value;
  rf.conf = conf;
  // A node rank from Slurm or the platform describes their multi-node job; when flags or PET_*
  // make the run single-node, it does not apply.
  if (s.given("node_rank") && !(s.from_job.count("node_rank") && nodes.max == 1)) rf.node_rank = node_rank;
  if (s.given("master_addr")) rf.master_addr = s.at("master_addr").value;
  if (s.given("master_port")) rf.master_port = master_port;
  rf.local_addr = s.at("local_addr").value;
  rf.token = env.get("CRUN_RDZV_TOKEN").value_or("");
  rf.share_store = env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE").value_or("0") != "1";
  rf.program = program;
  plan_exclusion(s, rf);
  plan.multi_node = make_multi_node(rf, max_restarts, host);

  const auto& id = s.at("rdzv_id");
  plan.run_id = plan.standalone.value && id.value == "none" ? Sourced<std::string>{random_run_id(), "fresh (standalone)"} : id;
  // The workers' MASTER_ADDR / MASTER_PORT when they do not share the agents' store (a static
  // multi-node job's --master-port is the store's; its workers get a fresh port).
  const auto& addr = s.at("master_addr");
  plan.master_addr = {addr.value.empty() ? "127.0.0.1" : addr.value, addr.source};
  plan.master_port.source = s.at("master_port").source;
  if (s.given("master_port") && master_port > 0 &&
      !(plan.multi_node && plan.rdzv_backend.value == RendezvousBackend::kStatic)) {
    plan.master_port.value = static_cast<std::uint16_t>(master_port);
  }
}

}  // namespace

LaunchPlan resolve_launch_plan(const std::vector<std::string>& argv, const EnvSnapshot& env, const HostFacts& host) {
  LaunchPlan plan;
  const CommandLine cl = parse_command_line(argv);
  if (cl.exit_now) {
    plan.exit_now = cl.exit_now;
    return plan;
  }
  plan.print_config = cl.print_config;
  plan.slurm_tasks = cl.slurm_tasks;

  JobEnvironment job;
  if (!cl.slurm_tasks) {
    try {
      job = detect_job_environment(env);
    } catch (const std::invalid_argument& e) {
      usage(e.what());
    }
  }
  SettingTexts s = apply_precedence(cl, env, job);
  plan.job_kind = job.kind;
  plan.note = job.note;

  if (cl.slurm_tasks) {
    for (const char* key : {"nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "standalone", "max_restarts", "node_rank",
                            "virtual_local_rank", "numa_binding"}) {
      if (s.given(key)) usage("--slurm-tasks: " + s.at(key).source + " does not apply (srun starts every worker; there is no agent)");
    }
  }
  plan_workers(s, host, plan);
  plan_torch2_settings(s, env, host, plan);
  plan_operator_settings(s, plan);
  plan_watchdogs(s, env, plan);
  plan_node_checks(s, env, plan);
  plan_rendezvous(s, job, cl.program, env, host, plan.max_restarts.value, plan);
  plan_timeouts(s, env, plan);
  plan_program(cl.program, s, env, plan);
  plan_standby(s, plan);
  plan_precheck(s, plan);
  plan_console_settings(s, plan);
  plan_agent_settings(env, host, plan);
  if (cl.slurm_tasks) {
    try {
      plan.task_env = slurm_task_environment(env, host, s.given("master_addr") ? std::optional<std::string>(s.at("master_addr").value) : std::nullopt,
                                             s.given("master_port") ? std::optional<int>(int_setting(s, "master_port", "--master-port")) : std::nullopt,
                                             plan.role.value);
    } catch (const std::invalid_argument& e) {
      usage(e.what());
    }
  }
  for (const auto& spec : launch_settings()) plan.settings.emplace_back(spec.key, s.at(spec.key));
  return plan;
}

}  // namespace crun
