// Pinned agents for the --precheck tests (tests/multinode, tests/etcd): crun, and so its
// precheck's workers, pinned to one CPU with taskset, and busy loops that slow one CPU down.
//
// Contract
//   - crun_pinned(cl, host, cpu, flags, script, env) starts `/usr/bin/env ENV... crun FLAGS /bin/sh
//     SCRIPT` on `host` under `taskset -c CPU`; the ChildProcess lives as long as `cl`. On CPU 0
//     (the healthy hosts) it also runs at nice -10 (the tests are root): other work on the
//     machine at nice 0 or above then takes a tenth of that CPU from it at most, not most of it.
//   - busy_loops_on_cpu1() starts kBusyLoops shell busy loops pinned to CPU 1; they run until the
//     test signals them (SIGKILL, by pid) or the returned processes are destroyed.
//   The healthy hosts go on CPU 0, the slowed one on CPU 1 beside the loops (about 1/7 of a core
//   against a whole one): other work on a shared machine then cannot bring the two close.
//
// Threading
//   Use from the test's thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/cluster.h"

namespace crun::test {

constexpr int kBusyLoops = 6;

inline ChildProcess& crun_pinned(Cluster& cl, int host, int cpu, const std::vector<std::string>& flags,
                                 const std::string& script, const std::vector<std::string>& env) {
  std::vector<std::string> argv{"/usr/bin/taskset", "-c", std::to_string(cpu)};
  if (cpu == 0) argv.insert(argv.end(), {"/usr/bin/nice", "-n", "-10"});
  argv.push_back("/usr/bin/env");
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(CRUN_BIN);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"/bin/sh", script});
  return cl.start(host, argv);
}

inline std::vector<std::unique_ptr<ChildProcess>> busy_loops_on_cpu1() {
  std::vector<std::unique_ptr<ChildProcess>> busy;
  for (int i = 0; i < kBusyLoops; ++i) {
    busy.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/bin/taskset", "-c", "1", "/bin/sh", "-c", "while :; do :; done"}));
  }
  return busy;
}

}  // namespace crun::test
