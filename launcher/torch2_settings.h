// torchrun 2.x's worker settings beyond 1.13's: --virtual-local-rank,
// --duplicate-stdout-filters / --duplicate-stderr-filters and --numa-binding.
//
// Contract
//   - plan_torch2_settings reads their texts (after plan_workers: it needs nproc_per_node).
//     --virtual-local-rank, as torch's LocalElasticAgent: each local rank's CUDA_VISIBLE_DEVICES
//     is its entry in `env`'s CUDA_VISIBLE_DEVICES (comma-separated, blanks dropped; set but
//     empty is one empty entry), else its local rank's number; a local rank without an entry
//     throws LaunchUsageError. The workers then see LOCAL_RANK=0 (agent/worker_env.h).
//   - TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE from `env`, as torch reads it (agent/log_line_prefix.h).
//   - (--event-log-handler is an operators' setting: launcher/operator_settings.h.)
//   - --duplicate-std{out,err}-filters: split as torch's comma-separated list (split_filters); the
//     agent copies the tee'd console lines that contain one of them to the attempt's
//     filtered_std{out,err}.log (agent/line_router.h).
//   - --numa-binding: torch's choices node, socket, exclusive, core-complex; given, each local
//     rank's CPUs (launcher/numa_binding.h) from `host`'s cpu_topology, its GPUs seen through
//     `env`'s CUDA_VISIBLE_DEVICES. The topology is read only then. The agent sets each worker's
//     CPU affinity to its list before exec (torch runs the worker under numactl --physcpubind).
//   - Every error is one line naming the flag.
//
// Threading
//   Pure function.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_inputs.h"
#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

void plan_torch2_settings(const SettingTexts& s, const EnvSnapshot& env, const HostFacts& host, LaunchPlan& plan);
std::vector<std::string> split_filters(const std::string& text);

}  // namespace crun
