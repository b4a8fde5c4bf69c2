// The agent's side of --precheck (docs/operations.md, "Pre-flight check"): the first start's
// launches turned into crun-precheck's, and the verdict it leaves read back.
//
// Contract
//   - precheck_beside_this_program(): crun-precheck in the directory of the running executable
//     (as crun-keeper, agent/keeper.h); "crun-precheck" when /proc is missing.
//   - use_precheck(plan, ...): the launch runs `program --slowdown X` instead of the worker's
//     program, with the worker's environment plus CRUN_PRECHECK_RESULT=result_file; nothing else
//     of the plan changes.
//   - read_precheck(path): the verdict local rank 0 wrote (precheck/precheck_verdict.h's JSON):
//     a one-line summary, the JSON itself, and `proceed` (no slow node). A missing or unreadable
//     file: proceed, and the summary says so (the workers all exited 0; the precheck measured
//     nothing this agent can read, which is no reason to keep the node out).
//
// Threading
//   Plain functions; read_precheck reads a file.
#pragma once

#include <string>

#include "agent/worker_launch.h"

namespace crun {

inline constexpr const char* kPrecheckResultVariable = "CRUN_PRECHECK_RESULT";

struct PrecheckReading {
  std::string line;     // "precheck: this node 0.21 s, median 0.2 s over 2 nodes: ok"
  std::string verdict;  // the JSON, "" when none
  bool proceed = true;
};

std::string precheck_beside_this_program();
void use_precheck(WorkerLaunchPlan& plan, const std::string& program, double slowdown, const std::string& result_file);
PrecheckReading read_precheck(const std::string& path);

}  // namespace crun
