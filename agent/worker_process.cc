#include "agent/worker_process.h"

#include <fcntl.h>
#include <linux/sched.h>  // struct clone_args, CLONE_INTO_CGROUP
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "agent/clone_on_stack.h"
#include "base/open_files.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace crun {
namespace {

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes every descriptor from `first` up (raw system calls only: runs in the vfork child).
void close_inherited_fds(unsigned first) {
  if (::close_range(first, ~0U, 0) == 0) return;
  // Kernels before 5.9: close one by one up to the descriptor limit.
  struct rlimit lim;
  const rlim_t top = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY ? lim.rlim_cur : 65536;
  for (rlim_t fd = first; fd < top; ++fd) ::close(static_cast<int>(fd));
}

// Runs in the vfork child (shares the agent's memory until execve): raw system calls only, no
// allocation, no locks, nothing written to memory the agent reads.
void write_str(int fd, const char* s) { (void)!::write(fd, s, std::strlen(s)); }

// A number as text into `buf` (no allocation).
const char* decimal(int n, char (&buf)[16]) {
  char* p = buf + sizeof(buf) - 1;
  *p = '\0';
  unsigned v = n < 0 ? 0u - static_cast<unsigned>(n) : static_cast<unsigned>(n);
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && p > buf + 1);
  if (n < 0) *--p = '-';
  return p;
}

// `handlers_cleared`: born with CLONE_CLEAR_SIGHAND, the kernel has already put the agent's
// handlers back to the defaults (what was ignored stays so).
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, int out_w, int err_w,
                             int message_fd, pid_t agent_pid, int cgroup_procs_fd,
                             const std::vector<unsigned long>& cpu_mask, bool handlers_cleared) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent_pid) ::_exit(127);  // the agent died before prctl took effect
  // Under Yama ptrace_scope=1 only ancestors may attach; the agent's eu-stack is not one. This lets
  // the agent and its descendants attach (stacks before a kill; agent/stack_capture.h); it
  // survives exec. EINVAL without Yama: nothing to allow.
  ::prctl(PR_SET_PTRACER, agent_pid, 0, 0, 0);
  // Handlers the agent installed (asio's signal_set) must not run here: back to the defaults.
  // SIGPIPE, which the agent ignores, too.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG && !handlers_cleared; ++s) {
    if (s == SIGKILL || s == SIGSTOP || s == SIGPIPE) continue;
    struct sigaction old;
    if (::sigaction(s, nullptr, &old) != 0) continue;
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) ::sigaction(s, &dfl, nullptr);
  }
  ::sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, 0);  // dup2 clears close-on-exec on fd 0
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  if (cgroup_procs_fd >= 0 && ::write(cgroup_procs_fd, "0", 1) != 1) {
    char num[16];
    write_str(2, "crun: cannot join the job's cgroup (errno ");
    write_str(2, decimal(errno, num));
    write_str(2, "; CRUN_NO_CGROUP=1 runs without it)\n");
    ::_exit(127);
  }
  if (!cpu_mask.empty() &&
      ::syscall(SYS_sched_setaffinity, 0, cpu_mask.size() * sizeof(unsigned long), cpu_mask.data()) != 0) {
    char num[16];
    write_str(2, "crun: cannot bind the worker to its --numa-binding CPUs (errno ");
    write_str(2, decimal(errno, num));
    write_str(2, ")\n");
    ::_exit(127);
  }
  restore_open_files_soft_limit();  // what crun was given, not what its store raised it to
  // Last: descriptor 3 may have been the cgroup's until now.
  if (message_fd == 3) {
    ::fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
  } else if (message_fd >= 0) {
    ::dup2(message_fd, 3);
  }
  close_inherited_fds(message_fd >= 0 ? 4 : 3);
  ::execve(path, argv, envp);
  write_str(2, "crun: cannot execute ");
  write_str(2, path);
  write_str(2, " (execve failed)\n");
  ::_exit(127);
}

#ifdef CRUN_CLONE_ON_STACK
struct ChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int out_w, err_w, message_fd;
  pid_t agent_pid;
  const std::vector<unsigned long>* cpu_mask;
};

int child_in_cgroup(void* p) {
  const auto* a = static_cast<const ChildArgs*>(p);
  exec_child(a->path, a->argv, a->envp, a->out_w, a->err_w, a->message_fd, a->agent_pid, -1, *a->cpu_mask, true);  // born in the cgroup
}

// Kernels without clone3 or CLONE_INTO_CGROUP (before 5.7) answer these: vfork from then on.
std::atomic<bool> g_clone3_unsupported{false};
#endif

// vfork; the child joins the cgroup by writing to `cgroup_procs_fd` (when >= 0) and execs. Its
// own function: the child never returns from it (exec_child does not return), and the caller's
// variables are not live across the vfork.
__attribute__((noinline)) pid_t vfork_worker(const char* path, char* const* argv, char* const* envp, int out_w,
                                             int err_w, int message_fd, pid_t agent_pid, int cgroup_procs_fd,
                                             const std::vector<unsigned long>& cpu_mask) {
  const pid_t pid = ::vfork();
  if (pid == 0) exec_child(path, argv, envp, out_w, err_w, message_fd, agent_pid, cgroup_procs_fd, cpu_mask, false);
  return pid;
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const SpawnOptions& options) {
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  cenv.reserve(env.size() + 1);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  // The affinity mask, built here: the vforked child only hands it to the kernel.
  std::vector<unsigned long> cpu_mask;
  constexpr std::size_t kBits = 8 * sizeof(unsigned long);
  for (int c : options.cpus) {
    const auto bit = static_cast<std::size_t>(c);
    if (cpu_mask.size() <= bit / kBits) cpu_mask.resize(bit / kBits + 1, 0);
    cpu_mask[bit / kBits] |= 1ul << (bit % kBits);
  }

  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw_errno("pipe2");
  if (!options.merge_stderr && ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    errno = e;
    throw_errno("pipe2");
  }
  const int err_w = options.merge_stderr ? out[1] : err[1];  // stderr into the stdout pipe, or its own
  const pid_t agent_pid = ::getpid();
  // vfork or clone3 with CLONE_VFORK (as posix_spawn does): no page-table copy, the agent waits
  // only until execve. All signals are blocked across it so no agent handler runs in the child.
  sigset_t all, saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  const char* path = options.program.empty() ? cargv[0] : options.program.c_str();
  pid_t pid = -1;
  int fork_errno = 0;
  bool made = false;
#ifdef CRUN_CLONE_ON_STACK
  if (options.cgroup_dir_fd >= 0 && !g_clone3_unsupported.load(std::memory_order_relaxed)) {
    alignas(16) char stack[64 * 1024];  // the child's, while this frame waits for its exec
    ChildArgs a{path, cargv.data(), cenv.data(), out[1], err_w, options.message_fd, agent_pid, &cpu_mask};
    clone_args ca{};
    ca.flags = CLONE_VFORK | CLONE_INTO_CGROUP | CLONE_CLEAR_SIGHAND;
#ifndef CRUN_SANITIZER_BUILD
    ca.flags |= CLONE_VM;  // no page-table copy (clone_on_stack.h: not under a sanitizer)
#endif
    ca.exit_signal = SIGCHLD;
    ca.stack = reinterpret_cast<std::uint64_t>(stack);
    ca.stack_size = sizeof stack;
    ca.cgroup = static_cast<std::uint64_t>(options.cgroup_dir_fd);
    const long r = clone_on_stack(&ca, sizeof ca, child_in_cgroup, &a);
    if (r > 0) {
      pid = static_cast<pid_t>(r);
      made = true;
    } else if (r == -ENOSYS || r == -E2BIG || r == -EINVAL) {
      g_clone3_unsupported.store(true, std::memory_order_relaxed);
    }
    // Any other refusal (the cgroup itself): vfork and the write below, which report it.
  }
#endif
  if (!made) {
    pid = vfork_worker(path, cargv.data(), cenv.data(), out[1], err_w, options.message_fd, agent_pid,
                       options.cgroup_procs_fd, cpu_mask);
    fork_errno = errno;
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) {
      if (fd >= 0) ::close(fd);
    }
    errno = fork_errno;
    throw_errno("vfork");
  }

  // Parent. Set the group here too so that killpg works even before the child ran.
  ::setpgid(pid, pid);
  ::close(out[1]);
  if (err[1] >= 0) ::close(err[1]);
  SpawnedWorker w;
  w.pid = pid;
  w.stdout_fd = out[0];
  w.stderr_fd = err[0];
  ::fcntl(w.stdout_fd, F_SETFL, ::fcntl(w.stdout_fd, F_GETFL) | O_NONBLOCK);
  if (w.stderr_fd >= 0) ::fcntl(w.stderr_fd, F_SETFL, ::fcntl(w.stderr_fd, F_GETFL) | O_NONBLOCK);
  w.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (w.pidfd < 0) {
    const int e = errno;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    close_fd(w.stdout_fd);
    close_fd(w.stderr_fd);
    errno = e;
    throw_errno("pidfd_open");
  }
  ::fcntl(w.pidfd, F_SETFD, FD_CLOEXEC);
  return w;
}

std::optional<ExitStatus> reap_worker(int pid, int pidfd) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc;
  do {
    rc = pidfd >= 0 ? ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info,
                               WEXITED | WNOHANG)
                    : ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 || info.si_pid == 0) return std::nullopt;
  return ExitStatus::from_siginfo(info);
}

std::optional<std::string> resolve_executable(const std::string& name, const std::string& search_path) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    return std::nullopt;
  }
  const std::string& dirs = search_path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace crun
