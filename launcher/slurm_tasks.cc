#include "launcher/slurm_tasks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "launcher/hostlist.h"
#include "launcher/job_environment.h"

namespace crun {
namespace {

std::string required(const char* name) {
  auto v = env_value(name);
  if (!v) throw std::invalid_argument(std::string("--slurm-tasks: ") + name + " is not set (run crun --slurm-tasks under srun)");
  return *v;
}

std::string first_of(std::initializer_list<const char*> names) {
  if (auto v = first_set(names)) return v->second;
  return required(*names.begin());
}

unsigned long long number(const char* name, const std::string& text) {
  try {
    return env_number(name, text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--slurm-tasks: ") + e.what());
  }
}

}  // namespace

EnvironmentList slurm_task_environment(const std::optional<std::string>& master_addr,
                                       const std::optional<int>& master_port, const std::string& role) {
  const std::string job = required("SLURM_JOB_ID");
  const std::string step = required("SLURM_STEP_ID");
  const std::string rank = required("SLURM_PROCID");
  const std::string local_rank = required("SLURM_LOCALID");
  const std::string node = required("SLURM_NODEID");
  const std::string world = first_of({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  const std::string nodes = first_of({"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  const std::string per_node = first_of({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const std::string nodelist = first_of({"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
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
      addr = resolve_slurm_node(hosts.front());
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(std::string("--slurm-tasks: ") + e.what());
    }
  }
  const int port = master_port ? *master_port : slurm_port(number("SLURM_JOB_ID", job), number("SLURM_STEP_ID", step));
  const auto restart = env_value("SLURM_RESTART_COUNT");
  EnvironmentList env = {
      {"RANK", rank},
      {"LOCAL_RANK", local_rank},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(tasks[node_id])},
      {"GROUP_RANK", node},
      {"GROUP_WORLD_SIZE", nodes},
      {"ROLE_NAME", role},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", addr},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RUN_ID", job + "." + step},
      {"TORCHELASTIC_RESTART_COUNT", restart ? *restart : "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
  };
  if (!env_value("OMP_NUM_THREADS")) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

int exec_slurm_task(const std::vector<std::string>& argv, const EnvironmentList& env) {
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  return errno;
}

}  // namespace crun
