// The operators' settings: --health-check-port / --health-check-addr (torch's
// TORCHELASTIC_HEALTH_CHECK_PORT, and PET_*) and --event-log-handler.
//
// Contract
//   - plan_operator_settings reads their texts into the plan: the port 0-65535 ("" or unset: no
//     endpoint; 0: one the kernel picks), the address an IPv4 or IPv6 literal (default
//     127.0.0.1: only this host), the handler null, console, dynamic_rendezvous (torch's names)
//     or jsonl:PATH (a path is required; whether it can be written is the agent's check, before
//     anything starts: agent/event_log.h).
//   - Every error is one line naming the flag (and the variable it came from).
//
// Threading
//   Pure function.
#pragma once

#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

void plan_operator_settings(const SettingTexts& s, LaunchPlan& plan);

}  // namespace crun
