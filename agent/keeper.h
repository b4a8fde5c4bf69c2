// Keeper: a small process that kills what is left of the job when the agent dies, however it dies.
//
// Contract
//   - The constructor starts the keeper process (keeper_process.h says what it does). By default
//     (KeeperForm::sharing_memory, where CRUN_CLONE_ON_STACK is defined: x86-64, no sanitizer)
//     a child that shares the agent's memory: clone3(CLONE_VM | CLONE_PIDFD | CLONE_CLEAR_SIGHAND)
//     on a stack and job of its own (one mapping, a guard page below the stack), no exec. The
//     kernel puts the agent's signal handlers back to their defaults; the child resets by hand
//     what else an exec would (the signal mask, its descriptors) and makes raw system calls
//     only (base/raw_syscall.h: the agent's errno and thread state are not its to touch). Such a
//     keeper costs ~0.6 ms less CPU per agent start than an exec'd one (docs/benchmarks.md). It
//     lives on if the agent is SIGKILLed or crashes (the memory stays until it exits; since Linux
//     5.16 a core dump stops only the agent's own threads). One death it does not outlive: the
//     OOM killer ends every process of the memory it chose, so an agent chosen over its (far
//     larger) workers takes this keeper along; the workers' PR_SET_PDEATHSIG still ends them.
//     Otherwise, or with KeeperForm::own_program, or if clone3 is refused: vfork, then exec of
//     crun-keeper beside this program's executable, else of this program itself
//     (/proc/self/exe), as `--crun-keeper <cgroup dir or ""> <marker> <run dir or "">`. Never a
//     plain fork: the agent would then pay a copy-on-write fault for every page it writes
//     afterwards. Either way it is named
//     crun-keeper; its only link to the agent is a pipe whose write end only the agent holds
//     (close-on-exec; workers never get it), read end at the keeper's descriptor 3. It keeps
//     no other descriptor of the agent's (store sockets, logs) but stderr; stdin and stdout are
//     /dev/null, the current directory /. It ignores the terminal's and a scheduler's signals
//     (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU):
//     the agent acts on those and ends the keeper itself. Throws std::system_error when it
//     cannot be started.
//   - worker_started(pid) tells it a worker's pid (= its process group); group_over() that the
//     agent has killed and reaped a whole group, so those groups must not be killed again (their
//     numbers may be reused). A keeper sharing memory is told by a write to its job
//     (apply_keeper_message): it sleeps until the pipe's end-of-file and reads the job then, so
//     an agent's start costs it one wake-up, not one per message. A keeper of its own is told
//     on the pipe; a message that does not fit there is dropped (never blocks).
//   - If the agent dies (SIGKILL, a crash), the pipe's end-of-file makes the keeper kill the job
//     and then remove `run_dir` ("" for none: the agent's temporary run directory, which the
//     agent removes itself when it ends normally).
//   - release() is the agent's normal end (its workers are gone): the keeper removes the cgroup
//     and exits while the agent does the rest of its own clean-up; finish() (release() first if
//     needed) reaps it, waiting at most 11 s; its stack's region is kept for the process's next
//     keeper (one is kept; the process's exit frees it). If the keeper died before, or
//     failed, finish() removes the cgroup itself. The destructor calls finish().
//
// Threading
//   Agent's event-loop thread. pidfd() becomes readable if the keeper dies early; the owner reaps
//   it then with reap_early_death().
#pragma once

#include <cstddef>
#include <string>

namespace crun {

struct KeeperJob;  // keeper_process.h

// How the keeper runs: a child sharing the agent's memory (where CRUN_CLONE_ON_STACK is
// defined, else as own_program), or a program of its own (crun-keeper).
enum class KeeperForm { sharing_memory, own_program };

class Keeper {
 public:
  Keeper(std::string cgroup_dir, std::string marker, std::string run_dir, KeeperForm form = KeeperForm::sharing_memory);
  ~Keeper();
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  void worker_started(int pid);
  void group_over();
  void release();
  void finish();

  int pid() const { return pid_; }
  int pidfd() const { return pidfd_; }
  // The keeper ended before finish(): reaps it and returns what ended it ("killed by SIGKILL").
  std::string reap_early_death();

 private:
  void send(int message);
  void unmap_region();

  std::string cgroup_dir_;
  std::string marker_;
  std::string run_dir_;
  int pid_ = -1;
  int pidfd_ = -1;
  int pipe_ = -1;  // write end
  void* region_ = nullptr;  // a keeper sharing memory: its stack and job, given back once it is reaped
  KeeperJob* shared_job_ = nullptr;  // that keeper's job, in region_: messages go there
  bool released_ = false;
  bool finished_ = false;
};

}  // namespace crun
