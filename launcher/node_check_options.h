// The node checks' part of a launch plan (docs/operations.md, "Node checks"): --node-check,
// --no-node-check, --node-check-timeout, --node-check-interval, --node-check-path,
// --node-check-min-free.
//
// Contract
//   - plan_node_checks fills plan.node_checks from their texts. --node-check, --no-node-check and
//     --node-check-path are repeatable: their texts hold one value a line (PET_NODE_CHECK too: one
//     command a line). A command must split into words (agent/node_check.h split_command); a
//     name must be a built-in check's; timeout and interval are seconds > 0 (at most 1e6);
//     min-free is a size (launcher/option_values.h parse_byte_size). A bad value throws
//     LaunchUsageError naming the flag and the value (one line). A command's program is looked
//     for on `env`'s PATH when the check runs (unset: kDefaultSearchPath).
//
// Threading
//   Pure function.
#pragma once

#include "launcher/launch_inputs.h"
#include "launcher/launch_plan.h"
#include "launcher/setting_sources.h"

namespace crun {

void plan_node_checks(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan);

}  // namespace crun
