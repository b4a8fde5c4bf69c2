#include "agent/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

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

// Only async-signal-safe calls between fork and exec.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, int out_w, int err_w,
                             pid_t agent_pid) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent_pid) ::_exit(127);  // the agent died before prctl took effect
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    ::dup2(devnull, 0);
    ::close(devnull);
  }
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  if (out_w > 2) ::close(out_w);
  if (err_w > 2 && err_w != out_w) ::close(err_w);
  ::execve(argv[0], argv, envp);
  const int err = errno;
  const char* prefix = "crun: cannot execute ";
  (void)!::write(2, prefix, std::strlen(prefix));
  (void)!::write(2, argv[0], std::strlen(argv[0]));
  (void)!::write(2, ": ", 2);
  const char* reason = std::strerror(err);  // not strictly async-signal-safe, but no locks in glibc
  (void)!::write(2, reason, std::strlen(reason));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  cenv.reserve(env.size() + 1);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw_errno("pipe2");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    errno = e;
    throw_errno("pipe2");
  }
  const pid_t agent_pid = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    errno = e;
    throw_errno("fork");
  }
  if (pid == 0) exec_child(cargv.data(), cenv.data(), out[1], err[1], agent_pid);

  // Parent. Set the group here too so that killpg works even before the child ran.
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  SpawnedWorker w;
  w.pid = pid;
  w.stdout_fd = out[0];
  w.stderr_fd = err[0];
  ::fcntl(w.stdout_fd, F_SETFL, ::fcntl(w.stdout_fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(w.stderr_fd, F_SETFL, ::fcntl(w.stderr_fd, F_GETFL) | O_NONBLOCK);
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

std::optional<ReapedStatus> reap_worker(int pid, int pidfd) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc;
  do {
    rc = pidfd >= 0 ? ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info,
                               WEXITED | WNOHANG)
                    : ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 || info.si_pid == 0) return std::nullopt;
  ReapedStatus s;
  if (info.si_code == CLD_EXITED) {
    s.exit_code = info.si_status;
  } else {
    s.term_signal = info.si_status;
  }
  return s;
}

std::optional<std::string> resolve_executable(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
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
