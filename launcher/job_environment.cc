#include "launcher/job_environment.h"

#include <charconv>
#include <stdexcept>

#include "launcher/hostlist.h"

namespace crun {
unsigned long long env_number(const char* name, const std::string& text) {
  unsigned long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) {
    throw std::invalid_argument(std::string(name) + ": expected a non-negative integer, got '" + text + "'");
  }
  return v;
}

std::optional<std::pair<const char*, std::string>> first_set(const EnvSnapshot& env,
                                                             std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env.get(n)) return std::make_pair(n, *v);
  }
  return std::nullopt;
}

namespace {

void detect_slurm(const EnvSnapshot& vars, JobEnvironment& env) {
  env.kind = "slurm";
  const std::string job = *vars.get("SLURM_JOB_ID");
  const auto job_id = env_number("SLURM_JOB_ID", job);
  const auto step = vars.get("SLURM_STEP_ID");
  auto& d = env.defaults;
  if (!step) {
    // The batch script runs on the job's first node only: this node is the whole run.
    const auto nodes = first_set(vars, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
    if (nodes && env_number(nodes->first, nodes->second) > 1) {
      env.note = "crun: running in the batch script of a " + nodes->second +
                 "-node Slurm job uses this node only; start one crun per node with `srun --ntasks-per-node=1 crun ...`";
    }
    d["nnodes"] = {"1", "Slurm batch script (no srun step)"};
    d["rdzv_id"] = {job + ".batch", "SLURM_JOB_ID"};
  } else {
    const auto step_id = env_number("SLURM_STEP_ID", *step);
    const auto nodes = first_set(vars, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
    if (!nodes) throw std::invalid_argument("SLURM_STEP_NUM_NODES: not set inside a Slurm step");
    const auto n = env_number(nodes->first, nodes->second);
    if (n < 1) throw std::invalid_argument(std::string(nodes->first) + ": must be >= 1");
    if (const auto tasks = first_set(vars, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"})) {
      if (env_number(tasks->first, tasks->second) > n) {
        throw std::invalid_argument(std::string(tasks->first) + "=" + tasks->second + " tasks on " + nodes->second +
                                    " nodes: crun is an agent per node (srun --ntasks-per-node=1 crun ...), or use "
                                    "--slurm-tasks for one task per worker");
      }
    }
    d["nnodes"] = {nodes->second, nodes->first};
    d["rdzv_id"] = {job + "." + *step, "SLURM_JOB_ID.SLURM_STEP_ID"};
    if (n > 1) {
      const auto list = first_set(vars, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
      if (!list) throw std::invalid_argument("SLURM_STEP_NODELIST: not set inside a Slurm step");
      std::vector<std::string> hosts;
      try {
        hosts = expand_hostlist(list->second);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(list->first) + ": " + e.what());
      }
      if (hosts.empty()) throw std::invalid_argument(std::string(list->first) + ": no hosts in '" + list->second + "'");
      const auto node_id = vars.get("SLURM_NODEID");
      if (!node_id) throw std::invalid_argument("SLURM_NODEID: not set inside a multi-node Slurm step");
      if (env_number("SLURM_NODEID", *node_id) >= n) {
        throw std::invalid_argument("SLURM_NODEID=" + *node_id + " is not below " + std::string(nodes->first) + "=" + nodes->second);
      }
      env.first_node = hosts.front();
      d["rdzv_backend"] = {"c10d", "Slurm step"};
      d["rdzv_endpoint"] = {hosts.front() + ":" + std::to_string(slurm_port(job_id, step_id)),
                            std::string("first host of ") + list->first + " (port from SLURM_JOB_ID)"};
      d["node_rank"] = {*node_id, "SLURM_NODEID"};
    }
  }
  if (const auto gpus = vars.get("SLURM_GPUS_ON_NODE")) {
    if (env_number("SLURM_GPUS_ON_NODE", *gpus) > 0) d["nproc_per_node"] = {*gpus, "SLURM_GPUS_ON_NODE"};
  }
}

void detect_platform(const EnvSnapshot& vars, JobEnvironment& env) {
  const auto addr = vars.get("MASTER_ADDR"), port = vars.get("MASTER_PORT");
  const auto rank = vars.get("RANK"), world = vars.get("WORLD_SIZE");
  if (!addr || !port || !rank || !world || vars.get("TORCHELASTIC_RUN_ID")) return;
  const auto nodes = env_number("WORLD_SIZE", *world);
  const auto node_rank = env_number("RANK", *rank);
  const auto port_number = env_number("MASTER_PORT", *port);
  if (nodes < 1) throw std::invalid_argument("WORLD_SIZE: must be >= 1");
  if (node_rank >= nodes) throw std::invalid_argument("RANK=" + *rank + " is not below WORLD_SIZE=" + *world);
  if (port_number < 1 || port_number > 65535) throw std::invalid_argument("MASTER_PORT: expected 1-65535, got " + *port);
  env.kind = "platform";
  auto& d = env.defaults;
  d["nnodes"] = {*world, "WORLD_SIZE (platform)"};
  d["node_rank"] = {*rank, "RANK (platform)"};
  d["master_addr"] = {*addr, "MASTER_ADDR (platform)"};
  d["master_port"] = {*port, "MASTER_PORT (platform)"};
  d["rdzv_backend"] = {"static", "platform MASTER_ADDR/RANK/WORLD_SIZE"};
}

}  // namespace

std::uint16_t slurm_port(unsigned long long job_id, unsigned long long step_id) {
  return static_cast<std::uint16_t>(20000 + (job_id * 31 + step_id) % 10000);
}

JobEnvironment detect_job_environment(const EnvSnapshot& vars) {
  JobEnvironment env;
  if (vars.get("SLURM_JOB_ID")) {
    detect_slurm(vars, env);
  } else {
    detect_platform(vars, env);
  }
  return env;
}

std::string slurm_node_address(const std::string& name, const HostFacts& host) {
  if (!name.empty() && host.resolve && !host.resolve(name).empty()) return name;
  if (host.slurm_node_addr) {
    if (auto addr = host.slurm_node_addr(name)) return *addr;
  }
  throw std::runtime_error("the first Slurm node '" + name +
                           "' does not resolve and `scontrol show node` gave no NodeAddr for it; pass --rdzv-endpoint");
}

}  // namespace crun
