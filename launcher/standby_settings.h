// The standby workers' settings (agent/standby_plan.h): --standby-workers and --standby-preload.
//
// Contract
//   - plan_standby (after plan_program) reads both from their texts (flag > PET_STANDBY_WORKERS /
//     PET_STANDBY_PRELOAD > default: off, "torch"). The preload is split at commas, blanks
//     dropped; each name must be a dotted Python identifier, else LaunchUsageError naming the
//     flag. On for a program that does not run under Python (--no-python, an ELF or #! program),
//     standbys stay off (a cluster may set PET_STANDBY_WORKERS for every job): the plan's note gets
//     one line saying so, and standby_workers' source says why.
//
// Threading
//   Pure function.
#pragma once

#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

void plan_standby(const SettingTexts& s, LaunchPlan& plan);

}  // namespace crun
