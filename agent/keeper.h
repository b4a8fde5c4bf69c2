// Keeper: the agent's side of crun-keeper, a small process that kills what is left of the job
// when the agent dies, however it dies (what the program does: keeper_process.h).
//
// Contract
//   - The constructor starts `program` (keeper_beside_this_program() for the agent) with
//     posix_spawn, as `<program> <cgroup dir or ""> <marker> <run dir or "">`, every signal
//     blocked (the keeper unblocks them once it ignores the terminal's and a scheduler's), the
//     read end of a pipe at descriptor 3. The write end is the keeper's only link to the agent:
//     only the agent holds it (close-on-exec; workers never get it). The keeper lives on if the
//     agent is SIGKILLed or crashes. Throws std::system_error when it cannot be started (a
//     missing program among the reasons: its message names the path).
//   - worker_started(pid) tells it a worker's pid (= its process group); group_over() that the
//     agent has killed and reaped a whole group, so those groups must not be killed again (their
//     numbers may be reused). Each is one int on the pipe; a message that does not fit there is
//     dropped (never blocks: the marker scan still finds the processes).
//   - If the agent dies (SIGKILL, a crash), the pipe's end-of-file makes the keeper kill the job
//     and then remove `run_dir` ("" for none: the agent's temporary run directory, which the
//     agent removes itself when it ends normally) and each directory remove_if_agent_dies()
//     named (the job's state root). That message is one write of at most PIPE_BUF bytes;
//     false when the path is too long (kKeeperMaxPath) or the pipe did not take it.
//   - release() is the agent's normal end (its workers are gone): the keeper removes the cgroup
//     and exits while the agent does the rest of its own clean-up; finish() (release() first if
//     needed) reaps it, waiting at most 11 s. If the keeper died before, or failed, finish()
//     removes the cgroup itself. The destructor calls finish().
//
// Threading
//   Agent's event-loop thread. pidfd() becomes readable if the keeper dies early; the owner reaps
//   it then with reap_early_death().
#pragma once

#include <string>

namespace crun {

// crun-keeper in the folder of this process's executable (/proc/self/exe): where the package
// and the build put it beside crun.
std::string keeper_beside_this_program();

class Keeper {
 public:
  Keeper(const std::string& program, std::string cgroup_dir, std::string marker, std::string run_dir);
  ~Keeper();
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  void worker_started(int pid);
  void group_over();
  bool remove_if_agent_dies(const std::string& dir);
  void release();
  void finish();

  int pid() const { return pid_; }
  int pidfd() const { return pidfd_; }
  // The keeper ended before finish(): reaps it and returns what ended it ("killed by signal 9").
  std::string reap_early_death();

 private:
  void send(int message);

  std::string cgroup_dir_;
  int pid_ = -1;
  int pidfd_ = -1;
  int pipe_ = -1;  // write end
  bool released_ = false;
  bool finished_ = false;
};

}  // namespace crun
