#include "agent/keeper.h"

#include <fcntl.h>
#include <linux/sched.h>  // struct clone_args, CLONE_PIDFD
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>
#include <system_error>

#include "agent/clone_on_stack.h"
#include "agent/exit_status.h"
#include "agent/job_cgroup.h"
#include "agent/keeper_process.h"
#include "base/raw_syscall.h"

extern char** environ;

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace crun {
namespace {

constexpr int kFinishWaitMs = 11000;  // the keeper's own clean-up is bounded by 10 s
constexpr int kIgnoredSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
                                   SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};

#ifdef CRUN_CLONE_ON_STACK
// The keeper's own memory in the agent's address space: a guard page, its stack, its job.
constexpr std::size_t kGuardBytes = 4096;
constexpr std::size_t kStackBytes = 128 * 1024;  // keeper_main's deepest frames use ~30 KiB
struct SharedKeeper {
  // Its own thread pointer: a copy of the head of the creating thread's TCB (self pointers, the
  // stack protector's canary at %fs:0x28), so that nothing it runs reads the TCB of an agent
  // thread, which may end before it. It uses no thread-local variable of libc's.
  alignas(64) unsigned char tcb[64];
  KeeperJob job;
  int pipe_in;
};
constexpr std::size_t kRegionBytes = kGuardBytes + kStackBytes + (sizeof(SharedKeeper) + 4095) / 4096 * 4096;

// A reaped keeper's region is kept for the next keeper of this process (an agent has one; tests
// make several, one after another), not unmapped: at an agent's end that munmap, in a process
// whose threads and keeper ran on other CPUs, is a TLB shoot-down by inter-processor interrupt
// (~50 us on a loaded 2-core VM). The process's exit frees it. At most one is kept.
std::atomic<void*> g_spare_region{nullptr};

// A region with its guard page below the stack; nullptr when it cannot be mapped.
void* take_region() {
  if (void* spare = g_spare_region.exchange(nullptr)) return spare;
  void* region = ::mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  ::mprotect(region, kGuardBytes, PROT_NONE);  // a stack overflow faults instead of writing into the agent
  return region;
}

// `region` holds no live keeper (never started, or reaped).
void give_back_region(void* region) {
  void* none = nullptr;
  if (!g_spare_region.compare_exchange_strong(none, region)) ::munmap(region, kRegionBytes);
}

// The child sharing the agent's memory (raw system calls only; all signals blocked on entry;
// born with CLONE_CLEAR_SIGHAND, so no handler of the agent's is left and what the agent inherited
// ignored stays so): what an exec would reset, reset by hand, then the keeper.
int keeper_child(void* p) {
  auto* k = static_cast<SharedKeeper*>(p);
  struct KernelSigaction {  // the kernel's struct sigaction (x86-64)
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  };
  KernelSigaction ignore{};
  ignore.handler = SIG_IGN;
  for (int s : kIgnoredSignals) raw_syscall(SYS_rt_sigaction, s, raw_arg(&ignore), 0, 8);
  const unsigned long none = 0;
  raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, raw_arg(&none), 0, 8);
  raw_syscall(SYS_chdir, raw_arg("/"));
  const int null = raw_open("/dev/null", O_RDWR);
  if (null >= 0) {
    raw_syscall(SYS_dup3, null, 0, 0);
    raw_syscall(SYS_dup3, null, 1, 0);
  }
  if (k->pipe_in != kKeeperPipeFd) raw_syscall(SYS_dup3, k->pipe_in, kKeeperPipeFd, 0);
  raw_syscall(SYS_close_range, kKeeperPipeFd + 1, ~0U, 0);  // its own copies of the agent's descriptors
  keeper_main(k->job);
}
#endif

// Runs in the vfork child (raw system calls only): the keeper's signals and descriptors, then exec.
[[noreturn]] void exec_keeper(int pipe_in, char* const* argv, char* const* envp, volatile int* exec_errno) {
  // The terminal's and a scheduler's signals are the agent's to act on (it ends the keeper
  // itself): ignored here, which survives exec. exec resets every handled signal to its default
  // (one crun inherited as ignored stays ignored: the keeper acts on no signal).
  struct sigaction ignore;
  std::memset(&ignore, 0, sizeof(ignore));
  ignore.sa_handler = SIG_IGN;
  for (int s : kIgnoredSignals) ::sigaction(s, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  (void)!::chdir("/");
  // stdin and stdout from /dev/null, stderr kept (for a failed clean-up), the pipe at 3, nothing
  // else of the agent's.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
  }
  if (pipe_in == kKeeperPipeFd) ::fcntl(kKeeperPipeFd, F_SETFD, 0);
  else ::dup2(pipe_in, kKeeperPipeFd);  // clears close-on-exec on 3
  ::close_range(kKeeperPipeFd + 1, ~0U, 0);
  ::execve(argv[0], argv, envp);
  *exec_errno = errno;
  ::_exit(127);
}

std::string describe(const siginfo_t& info) {
  const auto status = ExitStatus::from_siginfo(info);
  if (!status.signaled()) return "exited with code " + std::to_string(status.exit_code());
  return "killed by signal " + std::to_string(status.signal());
}

}  // namespace

Keeper::Keeper(std::string cgroup_dir, std::string marker, std::string run_dir, KeeperForm form)
    : cgroup_dir_(std::move(cgroup_dir)), marker_(std::move(marker)), run_dir_(std::move(run_dir)) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "keeper pipe");
  sigset_t all, saved;  // no agent handler may run in the child before it has reset them
  sigfillset(&all);
#ifdef CRUN_CLONE_ON_STACK
  if (form == KeeperForm::sharing_memory) {
    if (void* region = take_region()) {
      char* base = static_cast<char*>(region);
      auto* k = new (base + kGuardBytes + kStackBytes) SharedKeeper;
      k->pipe_in = p[0];
      unsigned char* tp;
      asm("mov %%fs:0, %0" : "=r"(tp));  // the thread pointer (x86-64: the TCB points at itself)
      std::memcpy(k->tcb, tp, sizeof k->tcb);
      void* self = k->tcb;
      std::memcpy(k->tcb, &self, sizeof self);        // tcb->tcb
      std::memcpy(k->tcb + 16, &self, sizeof self);   // tcb->self
      int pidfd = -1;
      clone_args ca{};
      ca.flags = CLONE_VM | CLONE_PIDFD | CLONE_SETTLS | CLONE_CLEAR_SIGHAND;
      ca.tls = reinterpret_cast<std::uint64_t>(k->tcb);
      ca.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
      ca.exit_signal = SIGCHLD;
      ca.stack = reinterpret_cast<std::uint64_t>(base + kGuardBytes);
      ca.stack_size = kStackBytes;
      long r = -ENAMETOOLONG;
      if (make_keeper_job(k->job, cgroup_dir_.c_str(), marker_.c_str(), run_dir_.c_str())) {
        ::pthread_sigmask(SIG_SETMASK, &all, &saved);
        r = clone_on_stack(&ca, sizeof ca, keeper_child, k);
        ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
      }
      if (r > 0) {
        pid_ = static_cast<int>(r);
        pidfd_ = pidfd;  // close-on-exec by definition
        region_ = region;
        shared_job_ = &k->job;
      } else {
        give_back_region(region);  // a kernel without clone3 or CLONE_PIDFD: exec below
      }
    }
  }
#else
  (void)form;
#endif
  if (pid_ < 0) {
    static const std::string program = keeper_program();
    std::string path = program;
    std::string flag = kKeeperFlag;
    char* argv[] = {path.data(), flag.data(), cgroup_dir_.data(), marker_.data(), run_dir_.data(), nullptr};
    // vfork + exec, not fork: a forked keeper would share the agent's pages copy-on-write, and
    // every page the agent then writes would fault and be copied (measured: `git show
    // b56c1a0:docs/benchmarks.md`, "Containing the workers' trees").
    volatile int exec_errno = 0;
    ::pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid_ = ::vfork();
    if (pid_ == 0) exec_keeper(p[0], argv, environ, &exec_errno);
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    if (pid_ < 0 || exec_errno != 0) {
      ::close(p[0]);
      ::close(p[1]);
      if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
      throw std::system_error(pid_ < 0 ? fork_errno : exec_errno, std::generic_category(),
                              pid_ < 0 ? "vfork of the keeper" : "exec of the keeper " + program);
    }
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));  // close-on-exec by definition
    if (pidfd_ < 0) {
      const int e = errno;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      ::close(p[0]);
      ::close(p[1]);
      throw std::system_error(e, std::generic_category(), "pidfd_open of the keeper");
    }
  }
  ::close(p[0]);
  pipe_ = p[1];
  ::fcntl(pipe_, F_SETFL, ::fcntl(pipe_, F_GETFL) | O_NONBLOCK);  // never block the event loop
}

Keeper::~Keeper() { finish(); }

void Keeper::send(int message) {
  if (pipe_ < 0) return;
  if (shared_job_ != nullptr) {  // the keeper reads its job at the pipe's end-of-file: no wake-up now
    apply_keeper_message(*shared_job_, message);
    return;
  }
  // A full pipe (a keeper that does not read) drops the message: the marker scan still finds
  // the processes. A dead keeper is reported through pidfd().
  (void)!::write(pipe_, &message, sizeof(message));
}

void Keeper::worker_started(int pid) { send(pid); }

void Keeper::group_over() { send(kKeeperGroupOver); }

void Keeper::release() {
  if (released_) return;
  released_ = true;
  send(kKeeperFinish);
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
}

void Keeper::finish() {
  if (finished_) return;
  finished_ = true;
  release();
  bool clean = false;
  if (pid_ > 0) {
    pollfd p{pidfd_, POLLIN, 0};
    int r;
    while ((r = ::poll(&p, 1, kFinishWaitMs)) < 0 && errno == EINTR) {
    }
    if (r == 0) ::kill(pid_, SIGKILL);  // stuck: the agent removes the cgroup itself below
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_), &info, WEXITED) != 0 && errno == EINTR) {
    }
    clean = r > 0 && info.si_code == CLD_EXITED && info.si_status == 0;
    pid_ = -1;
    unmap_region();
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
  if (!clean && !cgroup_dir_.empty()) kill_and_remove_cgroup(cgroup_dir_.c_str(), 1000);
}

void Keeper::unmap_region() {
#ifdef CRUN_CLONE_ON_STACK
  if (region_ != nullptr) give_back_region(region_);  // the keeper that ran there is reaped
#endif
  region_ = nullptr;
  shared_job_ = nullptr;
}

std::string Keeper::reap_early_death() {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  if (pid_ <= 0 ||
      ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_), &info, WEXITED | WNOHANG) != 0 ||
      info.si_pid == 0) {
    return {};
  }
  pid_ = -1;
  unmap_region();
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
  return describe(info);
}

}  // namespace crun
