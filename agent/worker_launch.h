// plan_worker_launch: what one worker of a start of the group is launched with: its argv, its
// environment, its CPUs, its attempt directory and where each of its output streams goes.
//
// Contract
//   - Pure: reads nothing but its arguments and makes, opens or writes nothing; the agent
//     (agent.cc, start_group) makes the directory, the heartbeat file and the log files it names.
//   - argv: config.worker_argv with each argument after the program put through safe_substitute
//     with ${local_rank} (torch's macros.substitute); program: config.worker_program.
//   - env: worker_environment() (agent/worker_env.h) over start.base_env, with the round's ranks,
//     the error file <dir>/error.json, the file timer's FIFO when start.timer_file is set, the
//     heartbeat file <dir>/heartbeat when start.heartbeats, CRUN_CONTROL_FILE <dir>/control (the
//     agent makes it empty before the start and reads it when the worker exits), the agent id, and the local rank's
//     visible device (--virtual-local-rank) when config.visible_devices is set.
//   - dir: <run dir>/attempt_<restart count>/<local rank> (agent/run_directory.h).
//   - cpus: config.worker_cpus[local rank] (--numa-binding), or empty (inherited).
//   - Streams (bit 1 stdout, bit 2 stderr, torchrun's Std): tee'd, to <dir>/std{out,err}.log and
//     the console with the local rank's prefix (agent/log_line_prefix.h), its console lines also
//     checked against --duplicate-std{out,err}-filters; redirected, to the file only; otherwise
//     the console alone, unprefixed. A local rank hidden by --local-ranks-filter never reaches
//     the console. Per-rank vectors shorter than the group count as 0 (redirects, tee) and shown
//     (console).
//
// Threading
//   Pure; any thread.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/run_directory.h"
#include "rendezvous/rendezvous_backend.h"

namespace crun {

// One start of the group, as the agent knows it when it launches the workers.
struct GroupStart {
  int restart_count = 0;
  RoundInfo round;
  std::vector<std::string> base_env;  // the agent's own environment, passed through
  std::string agent_id;               // CRUN_AGENT_ID (agent/worker_containment.h)
  std::string timer_file;             // torch's file timer FIFO ("": off)
  bool heartbeats = false;            // hang detection on: each worker gets a heartbeat file
  // The job's state root (agent/state_directory.h; "": none): each worker's CRUN_STATE_DIR is
  // its global rank's directory there.
  std::string state_root;
};

struct StreamPlan {
  std::string file;            // the log file ("": none)
  bool console = false;        // shown on the agent's console
  std::string console_prefix;  // put before each console line
  bool duplicate = false;      // console lines matching the duplicate filters also go there
};

struct WorkerLaunchPlan {
  int local_rank = 0;
  std::string program;            // the path execve runs ("": argv[0])
  std::vector<std::string> argv;  // argv[0]: the program's name as the worker sees it
  std::vector<std::string> env;   // complete environment
  std::vector<int> cpus;          // empty: inherited
  std::filesystem::path dir;      // attempt_<N>/<local rank>
  std::string error_file;         // <dir>/error.json
  std::string heartbeat_file;     // <dir>/heartbeat ("": hang detection off)
  std::string control_file;       // <dir>/control: CRUN_CONTROL_FILE
  StreamPlan out;
  StreamPlan err;
};

WorkerLaunchPlan plan_worker_launch(const AgentConfig& config, const RunDirectory& run_dir, const GroupStart& start,
                                    int local_rank);

}  // namespace crun
