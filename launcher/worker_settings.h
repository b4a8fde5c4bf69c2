// The worker group's part of a launch plan, each setting validated once: nproc_per_node,
// max_restarts, monitor_interval and start_method (checked, then unused), stop_timeout, role,
// redirects, tee, local_ranks_filter, signals_to_handle, log_dir; and the program.
//
// Contract
//   - plan_workers fills those settings of `plan` from their texts. nproc_per_node: N in
//     [1, 65536], cpu (host.cpus), gpu (host.gpus, an error without one) or auto (GPUs, else CPUs).
//     redirects/tee: torchrun's Std, "0".."3" for every local rank or "LOCAL_RANK:0-3,...". The
//     handled signals are always SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2 (Slurm's preemption
//     notices), plus --signals-to-handle's (never SIGKILL, SIGSTOP, SIGCHLD). log_dir: "" or a
//     path whose nearest existing part is a directory (stat'd here). capture_timeout: seconds in
//     [0, 3600] (0: off); python_stacks: not --no-python-stacks. A bad value throws
//     LaunchUsageError naming the flag.
//   - plan_watchdogs: heartbeat_timeout and initial_heartbeat_timeout, seconds >= 0 (0: off);
//     heartbeat_timeout "auto" sets heartbeat_auto (its timeout then 0 until the agent derives one);
//     max_no_progress_restarts >= 0;
//     torch's file timer, on when TORCHELASTIC_ENABLE_FILE_TIMER is "1" in `env` (as torch's
//     LocalElasticAgent), its FIFO at TORCHELASTIC_TIMER_FILE if set, else one crun makes.
//   - plan_program: a .py script (or -m module) runs under $PYTHON_EXEC (from `env`, default
//     python3) -u (runs_python); any other executable, or --no-python, runs as it is. The program and the
//     interpreter are looked up in `env`'s PATH (resolve_executable; set but empty: the current
//     directory; unset: kDefaultSearchPath); not found throws LaunchUsageError. The workers'
//     argv[0] is the program, or $PYTHON_EXEC, as written (the found python3's path when
//     PYTHON_EXEC is unset); worker_program is the path execve runs, its source "PATH" (or the
//     default's) when it was looked up.
//
// Threading
//   Pure functions of their arguments, but for the PATH lookup and --log-dir's stat.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_inputs.h"
#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

inline constexpr const char* kDefaultSearchPath = "/usr/local/bin:/usr/bin:/bin";

void plan_workers(const SettingTexts& s, const HostFacts& host, LaunchPlan& plan);
void plan_watchdogs(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan);
void plan_program(std::vector<std::string> program, const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan);

}  // namespace crun
