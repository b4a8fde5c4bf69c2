// crun_cmd: the command line of a standalone crun (CRUN_BIN) running crun_test_worker
// (CRUN_TEST_WORKER) with `crun_args` before the program and `worker_args` after it. Both macros
// come from the test target's compile definitions. Threading: a pure function.
#pragma once

#include <string>
#include <vector>

namespace crun::test {

inline std::vector<std::string> crun_cmd(const std::vector<std::string>& crun_args,
                                         const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv{CRUN_BIN};
  argv.insert(argv.end(), crun_args.begin(), crun_args.end());
  argv.push_back("--no-python");
  argv.push_back(CRUN_TEST_WORKER);
  argv.insert(argv.end(), worker_args.begin(), worker_args.end());
  return argv;
}

}  // namespace crun::test
