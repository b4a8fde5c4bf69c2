// The standby bootstrap: the Python program a standby worker runs (--standby-workers).
//
// Contract
//   standby_bootstrap_source() is agent/standby_bootstrap.py as it was at build time
//   (agent/CMakeLists.txt embeds it into a generated standby_bootstrap.cc, from
//   standby_bootstrap.cc.in). It is run as `PYTHON [flags] -c <source> LOCAL_RANK PRELOAD KIND
//   TARGET`
//   (agent/standby_plan.h) and reads one message at descriptor 3; what it does with it is the
//   Python file's first comment.
//
// Threading
//   Pure; any thread.
#pragma once

#include <string>

namespace crun {

const std::string& standby_bootstrap_source();

}  // namespace crun
