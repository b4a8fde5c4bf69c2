// resolve_launch_plan: argv + an environment + facts about this host -> the typed launch plan.
//
// Contract
//   - Pure: reads nothing but its arguments (the real ones come from launcher/launch_inputs.h),
//     except the program's lookup in `env`'s PATH (agent/worker_process.h resolve_executable: a
//     stat of each candidate), --log-dir's stat (launcher/worker_settings.h) and a fresh random
//     run id for a standalone job without --rdzv-id.
//   - Every setting the agent acts on comes from here: the flags' and also those crun reads
//     from its environment alone (launcher/agent_settings.h), each with its source.
//   - Accepts every torchrun flag in both spellings (launcher/command_line.h). Each setting comes
//     from its flag, else PET_<NAME>, else the Slurm or platform environment
//     (launcher/job_environment.h), else torchrun's default (launcher/setting_sources.h); every
//     typed setting carries its value and that source.
//   - Validates each group of settings once (rendezvous here and in launcher/multi_node_options.h,
//     workers and the program in launcher/worker_settings.h, torchrun 2.x's worker settings in
//     launcher/torch2_settings.h; the timeouts' order in launcher/timeout_order.h) before anything
//     starts: a bad value, an unknown flag, a missing program or interpreter, an inconsistent set
//     of timeouts raise LaunchUsageError whose message is one line naming the flag or variable.
//   - Decides single vs multi-node and who hosts the store (multi_node); --slurm-tasks instead
//     builds the task's worker environment (launcher/slurm_tasks.h).
//   - --help / --version: only `exit_now` is set.
//
// Threading
//   Pure function of its arguments; call from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/node_check_settings.h"
#include "agent/worker_env.h"
#include "launcher/launch_inputs.h"
#include "launcher/launch_setting.h"
#include "launcher/multi_node_options.h"

namespace crun {

struct NodeRange {
  int min = 1;
  int max = 1;
};

struct LaunchPlan {
  std::optional<std::string> exit_now;  // --help / --version: print this, exit 0
  bool print_config = false;
  bool slurm_tasks = false;
  std::string job_kind;  // "", "slurm" or "platform": the environment the job's shape came from
  std::string note;      // a line to print before launching ("" = none)
  // Every setting of launch_settings() as resolved text, in the table's order (--print-config).
  std::vector<std::pair<std::string, Sourced<std::string>>> settings;

  Sourced<bool> standalone;
  Sourced<NodeRange> nnodes;
  Sourced<RendezvousBackend> rdzv_backend;
  Sourced<std::string> run_id;
  std::optional<MultiNodePlan> multi_node;  // nullopt: single node

  Sourced<int> nproc_per_node;
  Sourced<int> max_restarts;
  Sourced<std::chrono::milliseconds> stop_timeout;
  Sourced<std::string> role;
  Sourced<std::string> master_addr;                   // the workers' MASTER_ADDR (single node)
  Sourced<std::optional<std::uint16_t>> master_port;  // the workers' MASTER_PORT; nullopt: free per round
  Sourced<std::vector<unsigned>> redirects;           // per local rank
  Sourced<std::vector<unsigned>> tee;                 // per local rank
  Sourced<std::vector<bool>> console;                 // per local rank (--local-ranks-filter)
  Sourced<std::string> log_dir;
  Sourced<std::vector<int>> handled_signals;
  Sourced<std::chrono::milliseconds> heartbeat_timeout;          // 0: off
  Sourced<std::chrono::milliseconds> initial_heartbeat_timeout;  // 0: off
  Sourced<int> max_no_progress_restarts;                         // 0: never
  Sourced<std::uint64_t> state_max_bytes;                        // per rank, in CRUN_STATE_DIR
  Sourced<std::string> state_persist_dir;                        // committed state also copied there ("": off)
  Sourced<NodeCheckSettings> node_checks;                        // launcher/node_check_options.h
  Sourced<std::optional<std::string>> file_timer;  // torch's file timer FIFO ("": crun makes one); nullopt: off
  Sourced<std::vector<std::string>> worker_argv;      // argv[0]: as written (the interpreter's path for Python)
  Sourced<std::string> worker_program;                 // the path execve runs; "PATH" when looked up there
  bool runs_python = false;                            // worker_argv runs a script or module under Python
  Sourced<bool> standby_workers;                       // --standby-workers (launcher/standby_settings.h)
  Sourced<bool> precheck;                              // --precheck: crun-precheck runs before the first start
  Sourced<double> precheck_slowdown;                   // --precheck-slowdown (> 1)
  Sourced<std::vector<std::string>> standby_preload;   // --standby-preload, split
  Sourced<std::chrono::milliseconds> capture_timeout;  // --capture-timeout (0: off)
  Sourced<bool> python_stacks;                         // not --no-python-stacks
  // --virtual-local-rank: each local rank's CUDA_VISIBLE_DEVICES (LOCAL_RANK=0); empty: off.
  Sourced<std::vector<std::string>> visible_devices;
  Sourced<std::string> log_line_prefix_template;  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE ("": torch's default)
  Sourced<std::vector<std::string>> duplicate_stdout_filters;  // --duplicate-stdout-filters, split
  Sourced<std::vector<std::string>> duplicate_stderr_filters;
  Sourced<std::vector<std::vector<int>>> worker_cpus;
  Sourced<std::optional<std::uint16_t>> health_check_port;  // nullopt: no endpoint
  Sourced<std::string> health_check_addr;
  Sourced<std::string> event_log_handler;
  std::string hostname;
  // No flag: from crun's environment (launcher/agent_settings.h).
  Sourced<std::string> temp_dir;             // where a temporary run dir goes (no --log-dir)
  Sourced<std::string> launcher_error_file;  // TORCHELASTIC_ERROR_FILE ("": none)
  Sourced<bool> job_cgroup;                  // CRUN_NO_CGROUP turns it off
  Sourced<bool> store_local_socket;          // CRUN_STORE_TCP_ONLY=1 turns it off (c10d/static)
  Sourced<std::string> state_root;           // CRUN_STATE_ROOT: where the job's state directory goes
  Sourced<bool> state_replication;           // multi-node: CRUN_STATE_REPLICATION=0 turns it off
  // The timeout stack (launcher/timeout_order.h): --heartbeat-timeout auto; --pg-timeout (nullopt:
  // not given, the workers get no CRUN_PG_TIMEOUT_SEC from crun); the process group's timeout
  // the order was checked against (torch's lowest default when not given); the notes to print.
  Sourced<bool> heartbeat_auto;
  Sourced<std::optional<std::chrono::milliseconds>> pg_timeout;
  Sourced<std::chrono::milliseconds> pg_timeout_in_effect;
  std::vector<std::string> timeout_notes;

  EnvironmentList task_env;  // --slurm-tasks: the worker's variables

  Sourced<bool> collapse_logs;                            // launcher/console_settings.h
  Sourced<std::chrono::milliseconds> collapse_window;
};

LaunchPlan resolve_launch_plan(const std::vector<std::string>& argv, const EnvSnapshot& env, const HostFacts& host);

}  // namespace crun
