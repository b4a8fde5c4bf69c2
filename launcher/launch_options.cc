#include "launcher/launch_options.h"

#include "launcher/print_config.h"
#include "launcher/timeout_order.h"

namespace crun {

LaunchOptions to_launch_options(const LaunchPlan& plan) {
  LaunchOptions out;
  if (plan.exit_now) {
    out.exit_now = plan.exit_now;
    return out;
  }
  AgentConfig& c = out.agent;
  if (plan.multi_node) c.multi_node = plan.multi_node->config;
  c.worker_argv = plan.worker_argv.value;
  c.worker_program = plan.worker_program.value;
  c.nproc_per_node = plan.nproc_per_node.value;
  c.max_restarts = plan.max_restarts.value;
  c.stop_timeout = plan.stop_timeout.value;
  c.role = plan.role.value;
  c.run_id = plan.run_id.value;
  c.master_addr = plan.master_addr.value;
  c.master_port = plan.master_port.value;
  c.handled_signals = plan.handled_signals.value;
  c.redirects = plan.redirects.value;
  c.tee = plan.tee.value;
  c.console = plan.console.value;
  c.log_dir = plan.log_dir.value;
  c.temp_dir = plan.temp_dir.value;
  c.launcher_error_file = plan.launcher_error_file.value;
  c.job_cgroup = plan.job_cgroup.value;
  c.state_root = plan.state_root.value;
  c.state_max_bytes = plan.state_max_bytes.value;
  c.state_persist_dir = plan.state_persist_dir.value;
  c.node_checks = plan.node_checks.value;
  c.state_replication = plan.state_replication.value;
  c.hostname = plan.hostname;
  c.visible_devices = plan.visible_devices.value;
  c.worker_cpus = plan.worker_cpus.value;
  c.log_line_prefix_template = plan.log_line_prefix_template.value;
  c.duplicate_stdout_filters = plan.duplicate_stdout_filters.value;
  c.duplicate_stderr_filters = plan.duplicate_stderr_filters.value;
  c.file_timer = plan.file_timer.value;
  c.health_check_port = plan.health_check_port.value;
  c.health_check_addr = plan.health_check_addr.value;
  c.event_log_handler = plan.event_log_handler.value;
  c.heartbeat_timeout = plan.heartbeat_timeout.value;
  c.initial_heartbeat_timeout = plan.initial_heartbeat_timeout.value;
  c.max_no_progress_restarts = plan.max_no_progress_restarts.value;
  c.standby_workers = plan.standby_workers.value;
  c.standby_preload = plan.standby_preload.value;
  c.precheck = plan.precheck.value;
  c.precheck_slowdown = plan.precheck_slowdown.value;
  c.collapse_logs = plan.collapse_logs.value;
  c.collapse_window = plan.collapse_window.value;
  c.heartbeat_auto = plan.heartbeat_auto.value;
  c.heartbeat_auto_ceiling = pg_timeout_ceiling(plan.pg_timeout_in_effect.value);
  c.pg_timeout = plan.pg_timeout.value;
  c.capture_timeout = plan.capture_timeout.value;
  c.python_stacks = plan.python_stacks.value && plan.runs_python;  // a native worker's environment stays torchrun's
  // Multi-node the coordinator owns the rule; progress is measured in heartbeat steps.
  if (c.multi_node && (c.heartbeat_timeout.count() > 0 || c.initial_heartbeat_timeout.count() > 0 || c.heartbeat_auto)) {
    c.multi_node->rendezvous.no_progress_limit = c.max_no_progress_restarts;
  }
  out.standalone = plan.standalone.value;
  out.slurm_tasks = plan.slurm_tasks;
  out.task_env = plan.task_env;
  out.note = plan.note;
  for (const auto& line : plan.timeout_notes) out.note += (out.note.empty() ? "" : "\n") + line;
  if (plan.print_config) out.exit_now = print_plan(plan);
  return out;
}

}  // namespace crun
