// The console's settings: --collapse-logs and --collapse-window (agent/line_collapse.h).
//
// Contract
//   - plan_console_settings reads both from their texts (flag > PET_COLLAPSE_LOGS /
//     PET_COLLAPSE_WINDOW > default: off, 0.2 s). The window is seconds, a number > 0 and at most
//     60; anything else raises LaunchUsageError, one line naming the flag (and the variable it
//     came from). The window is read (and checked) even when collapsing is off.
//   - Collapsing is per node: only this node's local ranks' lines are merged.
//
// Threading
//   Pure function.
#pragma once

#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

void plan_console_settings(const SettingTexts& s, LaunchPlan& plan);

}  // namespace crun
