// JobCgroup: the cgroup v2 that holds every worker of one agent and everything they start.
//
// Contract
//   - create() makes <the agent's own cgroup>/crun-<agent id> when the cgroup v2 hierarchy is
//     mounted, the agent's cgroup (the "0::" line of /proc/self/cgroup) is writable there, the new
//     cgroup is a domain and has cgroup.kill (Linux 5.14). The mount: /sys/fs/cgroup, or
//     /sys/fs/cgroup/unified beside v1 on hybrid systems, when cgroup v2 is there (statfs); else
//     the first cgroup v2 mount in /proc/self/mountinfo whose view holds a writable agent's cgroup
//     (a mount of a subtree counts where the agent's cgroup lies inside it). Otherwise it returns
//     nullptr: the caller falls back to process groups and the environment marker (as it does,
//     without calling it, under CRUN_NO_CGROUP: AgentConfig::job_cgroup).
//   - dir_fd() is the new cgroup's directory (O_RDONLY, close-on-exec): a worker is created in it
//     by clone3's CLONE_INTO_CGROUP (worker_process.h). procs_fd() is its cgroup.procs, open for
//     writing: where clone3 cannot do that, the spawned worker writes "0" to it before exec.
//     Either way the worker and all it starts live in the cgroup.
//   - Emptying and removing the cgroup is kill_and_remove_cgroup()'s, called by the keeper
//     (keeper.h), which outlives the agent when the agent is killed. Once the keeper has started,
//     keeper_removes() says so and the destructor leaves the directory alone; otherwise (an agent
//     whose keeper could not start) the destructor removes the cgroup if it is empty. An rmdir
//     of a name already gone still takes the parent directory's lock, the lock every agent's
//     mkdir and rmdir beside it wait for (1,024 agents on one host end at once).
//   - kill_and_remove_cgroup() removes `dir` at once when it is empty; else it kills every process
//     in it (cgroup.kill, when cgroup.events says it is populated), waits until the cgroup is
//     empty ("populated 0", waited on with poll, at most `timeout_ms`) and removes it.
//
// Threading
//   create() on the agent's thread; kill_and_remove_cgroup() on any thread.
#pragma once

#include <memory>
#include <string>

namespace crun {

class JobCgroup {
 public:
  static std::unique_ptr<JobCgroup> create(const std::string& agent_id);
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  void keeper_removes() { keeper_removes_ = true; }
  const std::string& dir() const { return dir_; }
  int procs_fd() const { return procs_fd_; }
  int dir_fd() const { return dir_fd_; }

 private:
  JobCgroup(std::string dir, int procs_fd, int dir_fd) : dir_(std::move(dir)), procs_fd_(procs_fd), dir_fd_(dir_fd) {}
  std::string dir_;
  int procs_fd_ = -1;
  int dir_fd_ = -1;
  bool keeper_removes_ = false;
};

// True when `dir` is gone; else false, errno saying what failed (EBUSY: still populated after the
// timeout).
bool kill_and_remove_cgroup(const char* dir, int timeout_ms);

}  // namespace crun
