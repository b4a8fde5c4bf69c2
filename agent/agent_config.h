// AgentConfig: everything the single-node agent needs to run a job, already validated.
//
// Contract
//   The launcher builds it from its launch plan; the agent trusts it (nproc >= 1, worker_argv[0]
//   an executable path, per-rank vectors of size nproc (visible_devices, worker_cpus: or empty), MultiNodeConfig::is_host decided).
//   Stream bits: 1 = stdout, 2 = stderr (torchrun's Std: 0 none, 1 out, 2 err, 3 all).
//
// Threading
//   Plain value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/node_check_settings.h"
#include "rendezvous/multi_node_config.h"

namespace crun {

struct AgentConfig {
  std::string worker_program;            // the path execve runs ("": worker_argv[0])
  std::vector<std::string> worker_argv;  // argv[0]: the program's name as written (what the worker sees);
                                         // the rest as written (the agent fills ${local_rank} per worker)
  int nproc_per_node = 1;
  int max_restarts = 0;
  std::chrono::milliseconds stop_timeout{30000};
  std::string role = "default";
  std::string run_id = "none";
  std::string master_addr = "127.0.0.1";
  std::optional<std::uint16_t> master_port;  // nullopt: a free port picked before each round
  std::vector<int> handled_signals;           // forwarded to workers, then crun stops

  std::vector<unsigned> redirects;  // per local rank: streams that go to files only
  std::vector<unsigned> tee;        // per local rank: streams that go to files and console
  std::vector<bool> console;        // per local rank: false when --local-ranks-filter hides it
  std::string log_dir;              // base log dir; empty: a temporary dir, removed at exit
  // Where that temporary dir is made (agent/run_directory.h temporary_run_base: TMPDIR,
  // XDG_RUNTIME_DIR, /dev/shm or /tmp).
  std::string temp_dir = "/tmp";
  // TORCHELASTIC_ERROR_FILE as crun itself was given it: the final root cause's error file is
  // copied there, as torchrun's @record main does ("": none).
  std::string launcher_error_file;
  // The workers' own cgroup v2 (agent/job_cgroup.h) where the host allows one; false
  // (CRUN_NO_CGROUP): process groups and the environment marker alone.
  bool job_cgroup = true;
  // State that outlives a worker (agent/state_directory.h): the job's state directory goes under
  // state_root (CRUN_STATE_ROOT); each rank's committed bytes there are bounded by state_max_bytes.
  std::string state_root = "/dev/shm";
  std::uint64_t state_max_bytes = std::uint64_t{1} << 30;
  // --state-persist-dir (agent/state_persister.h): committed state also copied there ("": off).
  std::string state_persist_dir;
  // Multi-node: each rank's committed state replicated to the next node (agent/state_replication.h);
  // false: CRUN_STATE_REPLICATION=0.
  bool state_replication = true;

  std::string hostname;
  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (agent/log_line_prefix.h); "": "[<role><local_rank>]:".
  std::string log_line_prefix_template;
  // torch's --virtual-local-rank: per local rank, the worker's CUDA_VISIBLE_DEVICES (its
  // LOCAL_RANK is then 0); empty: off.
  std::vector<std::string> visible_devices;
  // torch's --numa-binding: per local rank, the logical CPUs the worker runs on; empty: inherited.
  std::vector<std::vector<int>> worker_cpus;
  // torch's --duplicate-std{out,err}-filters: tee'd console lines containing any of these also go
  // to attempt_<N>/filtered_std{out,err}.log (empty: none).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // torch's file timer (TORCHELASTIC_ENABLE_FILE_TIMER=1): the agent serves the FIFO at this path
  // ("": one it makes in the run dir) and exports it to the workers as TORCHELASTIC_TIMER_FILE;
  // nullopt: off.
  std::optional<std::string> file_timer;

  // Hang detection (agent/hang_watch.h): a worker with no first heartbeat within
  // initial_heartbeat_timeout, or none within heartbeat_timeout of its last, is hung. 0: off.
  std::chrono::milliseconds heartbeat_timeout{0};
  std::chrono::milliseconds initial_heartbeat_timeout{0};
  // With heartbeats on: stop with kExitNoProgress after this many restarts in a row that did not
  // raise the highest step (0: never). Multi-node, the coordinator applies it
  // (MultiNodeConfig::rendezvous.no_progress_limit).
  int max_no_progress_restarts = 3;

  // Operators' view (agent/operator_view.h): the HTTP endpoint for /healthz, /metrics, /status and
  // the page (nullopt: off; 0: a port the kernel picks, printed), and the events' handler
  // (agent/event_log.h: null, console, dynamic_rendezvous or jsonl:PATH).
  std::optional<std::uint16_t> health_check_port;
  std::string health_check_addr = "127.0.0.1";
  std::string event_log_handler = "null";

  std::optional<MultiNodeConfig> multi_node;  // unset: single node (standalone store)

  // --standby-workers (agent/standby_plan.h): one spare interpreter per local rank, these modules
  // imported (--standby-preload), takes the next start's launch. Only for a Python program.
  bool standby_workers = false;
  std::vector<std::string> standby_preload;

  // Node checks (agent/node_checks.h), run before each request for a round.
  NodeCheckSettings node_checks;
  // --precheck (docs/operations.md, "Pre-flight check"): the group's first start runs crun-precheck
  // (beside crun) instead of the program; a node slower than precheck_slowdown x the nodes' median
  // asks to be excluded.
  bool precheck = false;
  double precheck_slowdown = 2.0;
  // --collapse-logs (agent/line_collapse.h): a console line several local ranks print within
  // collapse_window is shown once, with their ranks' prefix. This node's ranks only.
  bool collapse_logs = false;
  std::chrono::milliseconds collapse_window{200};

  // The timeout stack (docs/operations.md, "Timeouts, in order"). --heartbeat-timeout auto: the
  // steady limit is derived from the workers' beat intervals (agent/heartbeat_estimator.h), at
  // most heartbeat_auto_ceiling (0: none); until it is known, initial_heartbeat_timeout applies.
  // pg_timeout (--pg-timeout): the workers get it as CRUN_PG_TIMEOUT_SEC (nullopt: not given).
  bool heartbeat_auto = false;
  std::chrono::milliseconds heartbeat_auto_ceiling{0};
  std::optional<std::chrono::milliseconds> pg_timeout;

  // Stacks before the kill (agent/stack_capture.h): the bound on capturing every local worker's
  // stacks before a stop crun starts itself (0: no capture); python_stacks: the workers are a
  // Python program (the launcher's runs_python) that also dumps its Python stacks
  // (agent/python_stacks.h; --no-python-stacks turns it off).
  std::chrono::milliseconds capture_timeout{5000};
  bool python_stacks = true;
};

}  // namespace crun
