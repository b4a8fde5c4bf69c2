#include "launcher/agent_settings.h"

#include "agent/run_directory.h"

namespace crun {

void plan_agent_settings(const EnvSnapshot& env, const HostFacts& host, LaunchPlan& plan) {
  const bool logs = keeps_worker_logs(plan.redirects.value, plan.tee.value);
  const RunBase base = temporary_run_base(env.get("TMPDIR"), env.get("XDG_RUNTIME_DIR"), logs, host.writable_dir);
  plan.temp_dir = {base.dir, base.why};

  if (auto file = env.get("TORCHELASTIC_ERROR_FILE")) plan.launcher_error_file = {*file, "TORCHELASTIC_ERROR_FILE"};

  if (auto off = env.get("CRUN_NO_CGROUP"); off && *off != "0") plan.job_cgroup = {false, "CRUN_NO_CGROUP"};
  else plan.job_cgroup = {true, "default"};

  if (auto root = env.get("CRUN_STATE_ROOT"); root && !root->empty()) {
    if (!root->starts_with('/')) throw LaunchUsageError("CRUN_STATE_ROOT: expected an absolute path, got '" + *root + "'");
    plan.state_root = {*root, "CRUN_STATE_ROOT"};
  } else {
    plan.state_root = {"/dev/shm", "default"};
  }

  // Multi-node state replication (agent/state_replication.h); CRUN_STATE_REPLICATION=0 turns it off.
  if (auto off = env.get("CRUN_STATE_REPLICATION"); off && *off == "0") plan.state_replication = {false, "CRUN_STATE_REPLICATION"};
  else plan.state_replication = {true, "default"};

  const bool tcp_only = env.get("CRUN_STORE_TCP_ONLY") == std::optional<std::string>("1");
  plan.store_local_socket = {!tcp_only, tcp_only ? "CRUN_STORE_TCP_ONLY" : "default"};
  if (plan.multi_node) plan.multi_node->config.store_local_socket = !tcp_only;
}

}  // namespace crun
