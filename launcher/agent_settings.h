// plan_agent_settings: the agent's settings that have no flag, read from crun's own environment
// (and, for the run directory, this host), so that they reach the agent through the launch plan
// and --print-config shows each with its source.
//
// Contract
//   - temp_dir: where a temporary run directory goes when --log-dir is not given, chosen by
//     temporary_run_base (agent/run_directory.h) from TMPDIR, XDG_RUNTIME_DIR and
//     host.writable_dir, with the logs --redirects/--tee put there in mind (plan_workers first).
//     Its source says which: "TMPDIR", "XDG_RUNTIME_DIR", "/dev/shm: a tmpfs" or "default".
//   - launcher_error_file: TORCHELASTIC_ERROR_FILE ("" and "default" when unset): the final root
//     cause's error file is copied there, as torchrun's @record main does.
//   - job_cgroup: on by default; off when CRUN_NO_CGROUP is set to anything but "0" (an empty
//     variable counts as unset).
//   - state_root: CRUN_STATE_ROOT (an absolute path, else LaunchUsageError), default /dev/shm:
//     where the agent makes the job's state directory (agent/state_directory.h).
//   - store_local_socket (multi-node c10d/static, on MultiNodeConfig): on by default; off when
//     CRUN_STORE_TCP_ONLY is "1" (store/local_socket.h).
//
// Threading
//   Pure function of its arguments but for host.writable_dir.
#pragma once

#include "launcher/launch_inputs.h"
#include "launcher/launch_plan.h"

namespace crun {

void plan_agent_settings(const EnvSnapshot& env, const HostFacts& host, LaunchPlan& plan);

}  // namespace crun
