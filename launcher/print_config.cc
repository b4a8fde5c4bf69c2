#include "launcher/print_config.h"

#include <cstdio>

#include "agent/run_directory.h"
#include "launcher/cpu_topology.h"

namespace crun {

namespace {

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

std::string print_plan(const LaunchPlan& plan) {
  std::string text;
  auto line = [&](const std::string& name, const std::string& v, const std::string& source) {
    text += name + " = " + v + "  (" + source + ")\n";
  };
  line("mode", plan.slurm_tasks ? "slurm-tasks" : plan.multi_node ? "multi-node" : "single-node",
       plan.slurm_tasks ? "--slurm-tasks" : plan.job_kind.empty() ? "flags" : plan.job_kind + " environment");
  for (const auto& [key, v] : plan.settings) {
    std::string value = v.value;  // a repeatable setting's values, one a line: shown on one
    for (std::size_t nl = value.find('\n'); nl != std::string::npos; nl = value.find('\n', nl)) value.replace(nl, 1, "; ");
    line(key, value, v.source);
  }
  if (plan.multi_node) {
    const auto& m = *plan.multi_node;
    if (m.config.backend == MultiNodeConfig::Backend::kEtcdV3) {
      const auto& e = m.config.etcd;
      std::string members;
      for (const auto& ep : e.endpoints) members += (members.empty() ? "" : ",") + ep.str();
      line("etcd_endpoints", members, m.endpoint_source);
      line("etcd", std::string(e.tls ? "https" : "http") + ", key prefix " + e.key_prefix + ", lease ttl " +
                       std::to_string(e.lease_ttl.count() / 1000) + " s, first member " + e.endpoints[e.first_endpoint].str(),
           "--rdzv-conf");
    } else {
      line("store_endpoint", m.config.endpoint.str(), m.endpoint_source);
      line("store_host", m.config.is_host ? "this node" : "another node", m.host_source);
      line("store_local_socket",
           plan.store_local_socket.value ? "on (this host's clients reach the store through its local socket)" : "off (TCP alone)",
           plan.store_local_socket.source);
      line("workers_store",
           m.config.workers_use_agent_store ? "the agents' store (TORCHELASTIC_USE_AGENT_STORE=True)"
                                            : "rank 0 hosts its own (TORCHELASTIC_USE_AGENT_STORE=False)",
           m.config.workers_use_agent_store ? "c10d/static"
                                            : m.config.token.empty() ? "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" : "a store token is set");
    }
  }
  line("file_timer", plan.file_timer.value ? (plan.file_timer.value->empty() ? "on (a FIFO in the run dir)" : *plan.file_timer.value) : "off",
       plan.file_timer.source);
  if (!plan.worker_cpus.value.empty()) {
    std::string cpus;
    for (std::size_t lr = 0; lr < plan.worker_cpus.value.size(); ++lr) {
      cpus += (lr == 0 ? "" : " ") + std::to_string(lr) + ":" + format_cpu_list(plan.worker_cpus.value[lr]);
    }
    line("worker_cpus", cpus, plan.worker_cpus.source);
  }
  if (plan.health_check_port.value) {
    line("health_check", "http://" + plan.health_check_addr.value + ":" + std::to_string(*plan.health_check_port.value) + "/",
         plan.health_check_port.source);
  }
  line("log_line_prefix", plan.log_line_prefix_template.value.empty() ? "[${role_name}${local_rank}]: (torch's)" : plan.log_line_prefix_template.value,
       plan.log_line_prefix_template.source);
  if (plan.log_dir.value.empty()) {
    const bool logs = keeps_worker_logs(plan.redirects.value, plan.tee.value);
    line("run_dir", plan.temp_dir.value + "/crun-" + plan.run_id.value + "-XXXXXX, " + (logs ? "kept: it holds the logs" : "removed at exit"),
         plan.temp_dir.source);
  } else {
    line("run_dir", plan.log_dir.value + "/" + plan.run_id.value + "_XXXXXX, kept", plan.log_dir.source);
  }
  line("error_file", plan.launcher_error_file.value.empty() ? "none" : plan.launcher_error_file.value,
       plan.launcher_error_file.source);
  line("state_dir", plan.state_root.value + "/crun-state-" + plan.run_id.value + "-<agent pid>/rank-<rank>, removed at exit",
       plan.state_root.source);
  line("state_max_bytes", std::to_string(plan.state_max_bytes.value) + " per rank", plan.state_max_bytes.source);
  if (plan.multi_node) {
    line("state_replication", plan.state_replication.value ? "to the next node of the ring" : "off",
         plan.state_replication.source);
  }
  line("state_persist_dir", plan.state_persist_dir.value.empty() ? "off" : plan.state_persist_dir.value + "/rank-<rank>",
       plan.state_persist_dir.source);
  {
    const NodeCheckSettings& n = plan.node_checks.value;
    std::string builtin;
    for (const auto& name : builtin_node_checks()) builtin += (builtin.empty() ? "" : ",") + name + (n.disabled.count(name) ? " off" : "");
    std::string commands;
    for (const auto& c : n.commands) commands += (commands.empty() ? "" : "; ") + c;
    std::string paths;
    for (const auto& p : n.paths) paths += " " + p;
    line("node_checks", builtin + (commands.empty() ? "" : "; commands: " + commands) + "; timeout " +
                            std::to_string(n.timeout.count()) + " ms, interval " + std::to_string(n.interval.count()) +
                            " ms, min free " + std::to_string(n.min_free) + " bytes" + (paths.empty() ? "" : ", paths:" + paths),
         plan.node_checks.source);
  }
  line("job_cgroup", plan.job_cgroup.value ? "on (where cgroup v2 allows one)" : "off (process groups)", plan.job_cgroup.source);
  line("run_id", plan.run_id.value, plan.run_id.source);
  line("standby", plan.standby_workers.value ? "on, preload " + join_words(plan.standby_preload.value) : "off",
       plan.standby_workers.source);
  char slowdown[32];
  std::snprintf(slowdown, sizeof(slowdown), "%g", plan.precheck_slowdown.value);
  line("precheck", plan.precheck.value ? std::string("on, slow above ") + slowdown + "x the nodes' median" : "off",
       plan.precheck.source);
  line("stacks", plan.capture_timeout.value.count() == 0
                    ? "off"
                    : "before a kill, within " + std::to_string(plan.capture_timeout.value.count()) + " ms" +
                          (plan.runs_python ? (plan.python_stacks.value ? ", Python's too" : ", native only") : ""),
       plan.capture_timeout.source);
  line("program", join_words(plan.worker_argv.value), plan.worker_argv.source);
  line("executable", plan.worker_program.value, plan.worker_program.source);
  for (const auto& [k, v] : plan.task_env) line("task " + k, v, "Slurm task");
  return text;
}

}  // namespace crun
