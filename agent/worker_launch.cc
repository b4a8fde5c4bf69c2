#include "agent/worker_launch.h"

#include <cstdio>

#include "agent/log_line_prefix.h"
#include "agent/state_directory.h"
#include "agent/template_text.h"
#include "agent/worker_env.h"

namespace crun {

namespace {

// --pg-timeout as CRUN_PG_TIMEOUT_SEC: seconds, to the millisecond ("600", "0.25").
std::string pg_timeout_text(std::chrono::milliseconds d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1000.0);
  std::string t = buf;
  while (t.back() == '0') t.pop_back();
  if (t.back() == '.') t.pop_back();
  return t;
}

StreamPlan stream_plan(unsigned bit, unsigned redirect, unsigned tee, bool shown, const std::filesystem::path& file,
                       const std::string& prefix) {
  StreamPlan s;
  if (tee & bit) {
    s.file = file.string();
    s.console = shown;
    s.console_prefix = prefix;
    s.duplicate = shown;
  } else if (redirect & bit) {
    s.file = file.string();
  } else {
    s.console = shown;
  }
  return s;
}

}  // namespace

WorkerLaunchPlan plan_worker_launch(const AgentConfig& config, const RunDirectory& run_dir, const GroupStart& start,
                                    int local_rank) {
  const auto idx = static_cast<std::size_t>(local_rank);
  WorkerLaunchPlan p;
  p.local_rank = local_rank;
  p.dir = run_dir.attempt_dir(start.restart_count, local_rank);
  p.error_file = (p.dir / "error.json").string();
  if (start.heartbeats) p.heartbeat_file = (p.dir / "heartbeat").string();
  p.control_file = run_dir.control_file(start.restart_count, local_rank).string();

  WorkerIdentity who;
  who.local_rank = local_rank;
  who.local_world_size = config.nproc_per_node;
  who.max_restarts = config.max_restarts;
  who.role = config.role;
  who.run_id = config.run_id;
  who.error_file = p.error_file;
  who.timer_file = start.timer_file;
  who.heartbeat_file = p.heartbeat_file;
  who.control_file = p.control_file;
  who.agent_id = start.agent_id;
  if (!start.state_root.empty()) {
    who.state_dir = StateDirectory::rank_dir_of(start.state_root, start.round.rank_offset + local_rank).string();
  }
  if (idx < config.visible_devices.size()) who.visible_device = config.visible_devices[idx];
  if (config.pg_timeout) who.pg_timeout_sec = pg_timeout_text(*config.pg_timeout);
  p.env = worker_environment(start.base_env, start.round, who);

  p.program = config.worker_program;
  p.argv = config.worker_argv;
  for (std::size_t i = 1; i < p.argv.size(); ++i) {
    p.argv[i] = safe_substitute(p.argv[i], {{"local_rank", std::to_string(local_rank)}});
  }
  if (idx < config.worker_cpus.size()) p.cpus = config.worker_cpus[idx];

  const unsigned redirect = idx < config.redirects.size() ? config.redirects[idx] : 0;
  const unsigned tee = idx < config.tee.size() ? config.tee[idx] : 0;
  const bool shown = idx >= config.console.size() || config.console[idx];
  const std::string prefix =
      log_line_prefix(config.log_line_prefix_template, config.role, start.round.rank_offset + local_rank, local_rank);
  p.out = stream_plan(1u, redirect, tee, shown, p.dir / "stdout.log", prefix);
  p.err = stream_plan(2u, redirect, tee, shown, p.dir / "stderr.log", prefix);
  return p;
}

}  // namespace crun
