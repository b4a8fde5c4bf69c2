// Keeper: a small process that kills what is left of the job when the agent dies, however it dies.
//
// Contract
//   - The constructor forks the keeper (no exec). Its only link to the agent is a pipe whose write
//     end only the agent holds (close-on-exec; workers never get it, see worker_process.h). The
//     keeper closes every other descriptor it inherited (store sockets, logs) but stderr, ignores
//     the terminal's and the scheduler's signals (SIGINT, SIGTERM, SIGHUP, ...: the agent handles
//     those and then ends the keeper itself) and is named crun-keeper.
//   - worker_started(pid) tells it a worker's pid (= its process group); group_over() that the
//     agent has killed and reaped a whole group, so those groups must not be killed again (their
//     numbers may be reused).
//   - When the pipe reaches end-of-file without finish() (the agent died: SIGKILL, a crash), the
//     keeper kills the job:
//       with the job's cgroup (`cgroup_dir` non-empty): cgroup.kill, wait until it is empty, rmdir;
//       without: SIGKILL to every process group it was told of, then to every process whose
//       environment holds `marker` (CRUN_AGENT_ID=<id>, set in every worker's environment),
//       scanning /proc again until a scan finds none (at most 50 scans, 10 s).
//   - finish() is the agent's normal end (its workers are gone): the keeper removes the cgroup
//     (killing any straggler first) and exits; finish() reaps it, waiting at most 10 s. If the
//     keeper died before, finish() removes the cgroup itself. The destructor calls finish().
//   - The keeper uses async-signal-safe system calls only (it is forked from a process that may
//     have threads).
//
// Threading
//   Agent's event-loop thread. pidfd() becomes readable if the keeper dies early; the owner reaps
//   it then with reap_early_death().
#pragma once

#include <string>

namespace crun {

class Keeper {
 public:
  Keeper(std::string cgroup_dir, std::string marker);
  ~Keeper();
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  void worker_started(int pid);
  void group_over();
  void finish();

  int pid() const { return pid_; }
  int pidfd() const { return pidfd_; }
  // The keeper ended before finish(): reaps it and returns what ended it ("killed by SIGKILL").
  std::string reap_early_death();

 private:
  void send(int message);

  std::string cgroup_dir_;
  std::string marker_;
  int pid_ = -1;
  int pidfd_ = -1;
  int pipe_ = -1;  // write end
  bool finished_ = false;
};

}  // namespace crun
