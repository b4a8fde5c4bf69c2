// The timeout stack: crun's own timeouts and torch's process-group timeout, checked for the order
// in which they must fire, before anything starts (docs/operations.md, "Timeouts, in order").
//
// Contract
//   - check_timeout_order(stack) is pure. Its conflict (one line naming both values and where each
//     came from; "" when none) is a set crun refuses:
//       1. crun's --heartbeat-timeout must be below the process group's timeout: a rank hung
//          outside a collective is named by crun before its peers' collectives time out and
//          each of them looks like the root cause;
//       2. multi-node, the rendezvous' liveness (c10d heartbeat_timeout, etcd-v3 lease_ttl) must
//          be below the process group's timeout: a dead node is noticed by the rendezvous before
//          the survivors' collectives time out;
//       3. --pg-timeout and a CRUN_PG_TIMEOUT_SEC in crun's environment that says otherwise;
//       4. both spellings of one NCCL switch (TORCH_NCCL_X and NCCL_X, X = ASYNC_ERROR_HANDLING
//          or BLOCKING_WAIT) set to different values: torch 1.x reads one, torch 2.x the other.
//     Its notes (lines printed before the launch, not refused): multi-node with worker
//     heartbeats, a rendezvous liveness not below --heartbeat-timeout, or any with auto (a dead
//     node's survivors may call their own ranks hung first); NCCL's error handling and blocking wait both off (a
//     hung NCCL collective then never times out on its own).
//   - plan_timeouts(s, env, plan) reads --pg-timeout (PET_PG_TIMEOUT, then CRUN_PG_TIMEOUT_SEC:
//     seconds > 0), the NCCL switches from `env` and the plan's heartbeat and rendezvous
//     settings (call it after plan_watchdogs and plan_rendezvous), throws LaunchUsageError with
//     the conflict, fills plan.pg_timeout and plan.timeout_notes. Unset, the process group's
//     timeout is taken as torch's lowest default that may apply: 10 min (NCCL from torch 2.2;
//     Gloo and torch <= 2.1: 30 min), since crun does not know the workers' torch or backend.
//   - pg_timeout_ceiling(pg): the most `--heartbeat-timeout auto` may choose: 90 % of it.
//
// Threading
//   Pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_inputs.h"
#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

struct TimeoutValue {
  std::chrono::milliseconds value{0};
  std::string source;  // the flag or variable, e.g. "--heartbeat-timeout", "--rdzv-conf heartbeat_timeout"
};

inline constexpr std::chrono::milliseconds kTorchLowestDefaultPgTimeout{600000};
inline constexpr const char* kPgTimeoutVariable = "CRUN_PG_TIMEOUT_SEC";

struct TimeoutStack {
  std::optional<TimeoutValue> heartbeat;            // crun's, fixed (nullopt: off or auto)
  bool heartbeat_auto = false;                      // --heartbeat-timeout auto
  std::optional<TimeoutValue> rendezvous_liveness;  // multi-node only
  TimeoutValue pg;                                  // the process group's timeout ("" source: torch's default)
  std::optional<TimeoutValue> pg_variable;          // CRUN_PG_TIMEOUT_SEC in crun's environment
  std::vector<std::string> nccl_spelling_conflicts; // "TORCH_NCCL_X=a and NCCL_X=b"
  bool nccl_timeout_off = false;                    // error handling 0 and blocking wait not 1
};

struct TimeoutCheck {
  std::string conflict;  // "": consistent
  std::vector<std::string> notes;
};

TimeoutCheck check_timeout_order(const TimeoutStack& stack);
void plan_timeouts(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan);
std::chrono::milliseconds pg_timeout_ceiling(std::chrono::milliseconds pg);
std::string timeout_text(std::chrono::milliseconds d);  // "600 s", "0.5 s"

}  // namespace crun
