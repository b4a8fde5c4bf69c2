// The TLS twin: crun is linked statically (no dynamic loader to map and relocate libc at every
// start; docs/benchmarks.md, "Issue 16, fifth session"), and a static program cannot load
// Debian's libssl.so.3 safely (rendezvous/tls_library.h). The build makes crun-tls beside it:
// the same objects linked dynamically, which loads libssl on demand. A job that speaks TLS (an
// https etcd) is run by crun-tls: crun execs it, same arguments and environment, before it has
// started anything.
//
// Contract
//   - needs_tls_twin(options): the agent will speak TLS and this process cannot load libssl.
//   - exec_tls_twin(argv): execs crun-tls from the directory of this process' executable
//     (/proc/self/exe); returns only on failure, with one line for stderr naming the path and
//     the reason.
//
// Threading
//   Main thread, before the agent exists (nothing else runs yet).
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_options.h"

namespace crun {

bool needs_tls_twin(const LaunchOptions& options);
std::string exec_tls_twin(const std::vector<std::string>& argv);

}  // namespace crun
