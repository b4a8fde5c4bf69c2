#include "launcher/slurm_tasks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "agent/worker_env.h"
#include "launcher/hostlist.h"
#include "launcher/job_environment.h"

namespace crun {
namespace {

std::string required(const EnvSnapshot& env, const char* name) {
  auto v = env.get(name);
  if (!v) throw std::invalid_argument(std::string("--slurm-tasks: ") + name + " is not set (run crun --slurm-tasks under srun)");
  return *v;
}

std::string first_of(const EnvSnapshot& env, std::initializer_list<const char*> names) {
  if (auto v = first_set(env, names)) return v->second;
  return required(env, *names.begin());
}

unsigned long long number(const char* name, const std::string& text) {
  try {
    return env_number(name, text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--slurm-tasks: ") + e.what());
  }
}

}  // namespace

EnvironmentList slurm_task_environment(const EnvSnapshot& env, const HostFacts& host,
                                       const std::optional<std::string>& master_addr,
                                       const std::optional<int>& master_port, const std::string& role) {
  const std::string job = required(env, "SLURM_JOB_ID");
  const std::string step = required(env, "SLURM_STEP_ID");
  const std::string rank = required(env, "SLURM_PROCID");
  const std::string local_rank = required(env, "SLURM_LOCALID");
  const std::string node = required(env, "SLURM_NODEID");
  const std::string world = first_of(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  const std::string nodes = first_of(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  const std::string per_node = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const std::string nodelist = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
  const auto node_id = number("SLURM_NODEID", node);
  if (number("SLURM_PROCID", rank) >= number("SLURM_STEP_NUM_TASKS", world)) {
    throw std::invalid_argument("--slurm-tasks: SLURM_PROCID=" + rank + " is not below the step's " + world + " tasks");
  }
  std::vector<int> tasks;
  try {
    tasks = expand_tasks_per_node(per_node);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--slurm-tasks: SLURM_STEP_TASKS_PER_NODE: ") + e.what());
  }
  if (node_id >= tasks.size()) throw std::invalid_argument("--slurm-tasks: SLURM_NODEID=" + node + " has no SLURM_STEP_TASKS_PER_NODE entry");

  std::string addr;
  if (master_addr) {
    addr = *master_addr;
  } else {
    std::vector<std::string> hosts;
    try {
      hosts = expand_hostlist(nodelist);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--slurm-tasks: SLURM_STEP_NODELIST: ") + e.what());
    }
    if (hosts.empty()) throw std::invalid_argument("--slurm-tasks: SLURM_STEP_NODELIST names no host");
    try {
      addr = slurm_node_address(hosts.front(), host);
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(std::string("--slurm-tasks: ") + e.what());
    }
  }
  const int port = master_port ? *master_port : slurm_port(number("SLURM_JOB_ID", job), number("SLURM_STEP_ID", step));
  const auto restart = env.get("SLURM_RESTART_COUNT");
  const auto as_int = [](const char* name, unsigned long long v) {
    if (v > static_cast<unsigned long long>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument(std::string("--slurm-tasks: ") + name + " is out of range");
    }
    return static_cast<int>(v);
  };
  const int global_rank = as_int("SLURM_PROCID", number("SLURM_PROCID", rank));
  RoundInfo place;
  place.restart_count = restart ? as_int("SLURM_RESTART_COUNT", number("SLURM_RESTART_COUNT", *restart)) : 0;
  place.group_rank = as_int("SLURM_NODEID", node_id);
  place.group_world_size = as_int("SLURM_STEP_NUM_NODES", number("SLURM_STEP_NUM_NODES", nodes));
  place.world_size = as_int("SLURM_STEP_NUM_TASKS", number("SLURM_STEP_NUM_TASKS", world));
  WorkerIdentity who;
  who.local_rank = as_int("SLURM_LOCALID", number("SLURM_LOCALID", local_rank));
  // RANK is SLURM_PROCID whatever the task distribution (block or cyclic).
  place.rank_offset = global_rank - who.local_rank;
  place.master_addr = addr;
  place.master_port = static_cast<std::uint16_t>(port);
  who.local_world_size = tasks[node_id];
  who.max_restarts = 0;  // Slurm requeues the job; crun restarts nothing here
  who.role = role;
  who.run_id = job + "." + step;
  // No TORCHELASTIC_ERROR_FILE (no agent remains to read one; torch's @record then prints the
  // error to stderr, which Slurm keeps) unless crun's own environment (`env`) passes one on.
  return worker_variables(env.entries(), place, who);
}

void exec_slurm_task(const std::string& program, const std::vector<std::string>& argv, const EnvironmentList& env) {
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(program.empty() ? args[0] : program.c_str(), args.data());
}

}  // namespace crun
