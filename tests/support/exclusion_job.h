// ExclusionJob: the files and the worker script of the exclusion tests (tests/multinode,
// tests/etcd): one host whose worker fails twice, counting in a file, and workers that run until
// the test lets them finish.
//
// Contract
//   - The worker (script(), run by /bin/sh, one per node) fails with exit 3 while $FAILS (set on
//     one host only) holds fewer than two lines, once `go` exists; every other start writes
//     "start host=H group_rank=G restart=R" to `stamps` and runs until `done` exists, then exits 0.
//   - env(host, failing) is the KEY=VALUE list to start crun with (Cluster::crun_program).
//   - RequestJob (the worker requests tests): request_script() appends $ASK to the worker's
//     CRUN_CONTROL_FILE and exits $ASK_CODE on the host started with env(host, ASK, code), in its
//     first start only, once `go` exists; every other start stamps and runs until `done`.
//   - node_rank(agent, round, nodes, restart) waits (bound 30 s) for the agent's line "round R:
//     node rank K of N, restart C" and returns K (-1: it did not come).
//
// Threading
//   Use from the test's thread.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace crun::test {

struct ExclusionJob {
  TempDir dir{"crun-exclusion"};
  std::string go = (dir.path / "go").string();
  std::string done = (dir.path / "done").string();
  std::string stamps = (dir.path / "stamps").string();
  std::string fails = (dir.path / "fails").string();

  ExclusionJob() {
    std::ofstream(fails).flush();
    std::ofstream(stamps).flush();
    std::ofstream s(script());
    s << "if [ -n \"$FAILS\" ] && [ \"$(wc -l < \"$FAILS\")\" -lt 2 ]; then\n"
         "  while [ ! -e \"$GO\" ]; do sleep 0.05; done\n"
         "  echo failed >> \"$FAILS\"\n"
         "  exit 3\n"
         "fi\n"
         "echo \"start host=$HOSTNUM group_rank=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT\" >> \"$STAMPS\"\n"
         "while [ ! -e \"$DONE\" ]; do sleep 0.05; done\n";
  }
  std::string script() const { return (dir.path / "worker.sh").string(); }
  std::vector<std::string> env(int host, bool failing) const {
    std::vector<std::string> e{"GO=" + go, "DONE=" + done, "STAMPS=" + stamps, "HOSTNUM=" + std::to_string(host)};
    if (failing) e.push_back("FAILS=" + fails);
    return e;
  }
  static void touch(const std::string& path) { std::ofstream(path).flush(); }
};

// A job of ExclusionJob's files whose worker on the host given ASK appends $ASK to its
// CRUN_CONTROL_FILE once `go` exists and exits $ASK_CODE, in its first start only; every other
// start stamps and runs until `done`.
struct RequestJob : ExclusionJob {
  RequestJob() {
    std::ofstream s(request_script());
    s << "if [ -n \"$ASK\" ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
         "  while [ ! -e \"$GO\" ]; do sleep 0.05; done\n"
         "  echo \"$ASK\" >> \"$CRUN_CONTROL_FILE\"\n"
         "  exit \"$ASK_CODE\"\n"
         "fi\n"
         "echo \"start host=$HOSTNUM group_rank=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT\" >> \"$STAMPS\"\n"
         "while [ ! -e \"$DONE\" ]; do sleep 0.05; done\n";
  }
  std::string request_script() const { return (dir.path / "request.sh").string(); }
  std::vector<std::string> env(int host, const std::string& ask = "", int code = 0) const {
    auto e = ExclusionJob::env(host, false);
    if (!ask.empty()) e.insert(e.end(), {"ASK=" + ask, "ASK_CODE=" + std::to_string(code)});
    return e;
  }
};

inline int node_rank_of(ChildProcess& agent, int round, int nodes, int restart) {
  const std::regex line("round " + std::to_string(round) + ": node rank ([0-9]+) of " + std::to_string(nodes) +
                        ", restart " + std::to_string(restart) + ",");
  int rank = -1;
  agent.wait_until(
      [&](const std::string&, const std::string& err) {
        std::smatch m;
        if (!std::regex_search(err, m, line)) return false;
        rank = std::stoi(m[1].str());
        return true;
      },
      std::chrono::seconds(30));
  if (rank < 0) UNSCOPED_INFO("no 'round " << round << ": node rank' line; the agent said:\n" << agent.err());
  return rank;
}

}  // namespace crun::test
