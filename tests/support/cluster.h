// Cluster: test hosts as network namespaces on a private bridge (scripts/netns-cluster.sh), each
// agent a real crun process inside one of them. Shared by the multinode and faults tests.
//
// Contract
//   - Cluster(K) builds hosts 1..K at 10.77.0.1..K (needs root; REQUIRE fails otherwise) under a
//     name unique to this process; the destructor kills every crun it started (ChildProcess), then
//     removes the namespaces with anything still running in them.
//   - crun()/crun_program() start crun on a host; the returned ChildProcess lives as long as the
//     Cluster. link() cuts or restores a host's link (a partition). run() runs a short command on
//     a host and returns its output (REQUIRE: exit 0).
//   - The helpers below wait on events with a bound and never sleep.
//
// Threading
//   Use from the test's thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace crun::test {

class Cluster {
 public:
  explicit Cluster(int hosts);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  static std::string addr(int host) { return "10.77.0." + std::to_string(host); }
  const std::string& name() const { return name_; }
  std::string netns(int host) const { return name_ + "-h" + std::to_string(host); }

  // Starts crun on `host` with `flags`, then the test worker with `worker_args`.
  ChildProcess& crun(int host, const std::vector<std::string>& flags, const std::vector<std::string>& worker_args);
  // `env` entries KEY=VALUE are set for crun (through env(1), so crun's pid is the child's).
  ChildProcess& crun_program(int host, const std::vector<std::string>& flags, const std::string& program,
                             const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  // Any program on `host` (its pid is the ChildProcess's: `ip netns exec` execs it).
  ChildProcess& start(int host, const std::vector<std::string>& argv);
  void link(int host, bool up);
  // Runs `argv` on `host` to completion; returns its stdout and stderr. REQUIRE: exit 0.
  std::string run(int host, const std::vector<std::string>& argv);

 private:
  std::string name_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
};

// Flags of a c10d job whose store is hosted by host 1 (port 29400, run id "job").
std::vector<std::string> c10d(const std::string& nnodes, int nproc, const std::string& conf = "", int max_restarts = 0);

// Waits (up to `bound`) until the process' stderr contains `needle`. When it does not, its stderr
// goes with the next assertion (UNSCOPED_INFO), so a failed REQUIRE shows what the agent saw.
bool err_has(ChildProcess& p, const std::string& needle, std::chrono::milliseconds bound = std::chrono::seconds(30));

std::string read_file(const std::string& path);

// SIGTERM to every agent of a c10d job, the store's host (the first given) last, then each must
// end with 128 + SIGTERM (CHECK). Host first, an agent whose own SIGTERM the test delivers after
// the host has stopped the store (the test thread preempted between two kill()s on a loaded
// machine) ends as "store lost" (7) instead: what that agent saw, but not what this checks. The
// exit code and stderr of an agent that ends otherwise are shown.
void terminate_host_last(const std::vector<ChildProcess*>& host_first,
                         std::chrono::milliseconds bound = std::chrono::seconds(60));

// A fresh empty file under /tmp, removed on destruction.
struct TempFile {
  TempFile();
  ~TempFile();
  std::string path;
};

}  // namespace crun::test
