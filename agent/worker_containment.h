// WorkerContainment: no process of a worker's tree outlives the agent, however the agent ends.
//
// Contract
//   Set up once per agent (before any worker starts, and before the agent starts threads):
//   - Orphans (orphans.h): the agent is the child subreaper of its workers' trees; it reaps
//     re-parented orphans as they end, and once a group's workers are all gone (group_over()) it
//     kills what is left of their trees: each worker's process group, then every remaining
//     descendant, generation by generation (bounded).
//   - JobCgroup (job_cgroup.h), where cgroup v2 is usable and `job_cgroup` is true: every
//     worker joins the agent's job cgroup before exec (cgroup_procs_fd()), and so does all it starts.
//   - Keeper (keeper.h): crun-keeper, from beside the agent's executable (its constructor throws
//     when it is not there), which learns each worker's pid and, if the agent dies
//     (SIGKILL included), kills the job: the whole cgroup, then the workers' process groups and
//     every process whose environment carries CRUN_AGENT_ID=<agent_id()>; then it removes
//     `run_dir` ("" for none), the agent's temporary run directory, and each directory
//     remove_if_agent_dies() named (false: the keeper could not be told).
//   PR_SET_PDEATHSIG (worker_process.h) still ends each worker itself with the agent.
//   A standby (agent/standby_pool.h) is contained as a worker from standby_started(pid), and
//   group_over() leaves it alone (it is no part of the group that ended; the keeper is told its
//   pid again) until standby_taken(pid) makes it an ordinary worker of the next group or
//   worker_reaped(pid) says it is gone.
//   release() tells the keeper the agent ends normally (it removes the cgroup and exits while the
//   agent cleans up the rest); finish() (also the destructor) waits for it.
//   The keeper ending early is reported on stderr once; the agent goes on without it.
//
// Threading
//   The agent's event-loop thread.
#pragma once

#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace crun {

class WorkerContainment {
 public:
  WorkerContainment(boost::asio::io_context& io, const std::string& run_dir, bool job_cgroup = true);
  ~WorkerContainment();
  WorkerContainment(const WorkerContainment&) = delete;
  WorkerContainment& operator=(const WorkerContainment&) = delete;

  // Unique to this agent: the value of CRUN_AGENT_ID in every worker's environment.
  const std::string& agent_id() const;
  // The job cgroup's cgroup.procs and directory (for spawn_worker), or -1 without a cgroup.
  int cgroup_procs_fd() const;
  int cgroup_dir_fd() const;

  void worker_started(int pid);
  void worker_reaped(int pid);
  void standby_started(int pid);
  void standby_taken(int pid);
  void group_over();
  bool remove_if_agent_dies(const std::string& dir);
  void release();
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
