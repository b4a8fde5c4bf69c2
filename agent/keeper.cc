#include "agent/keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "agent/exit_status.h"
#include "agent/job_cgroup.h"
#include "agent/keeper_process.h"

extern char** environ;

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace crun {
namespace {

constexpr int kFinishWaitMs = 11000;  // the keeper's own clean-up is bounded by 10 s

std::string describe(const siginfo_t& info) {
  const auto status = ExitStatus::from_siginfo(info);
  if (!status.signaled()) return "exited with code " + std::to_string(status.exit_code());
  return "killed by signal " + std::to_string(status.signal());
}

// The keeper's process: `pipe_in` at descriptor 3, every signal blocked. Returns its pid, or
// throws.
pid_t spawn_keeper(const std::string& program, int pipe_in, char* const* argv) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, pipe_in, kKeeperPipeFd);  // clears close-on-exec, also on 3 itself
  sigset_t all;
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &all);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv, environ);
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    throw std::system_error(err, std::generic_category(),
                            "cannot run the keeper " + program + " (crun-keeper belongs beside crun)");
  }
  return pid;
}

}  // namespace

std::string keeper_beside_this_program() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "crun-keeper";  // no /proc: posix_spawn's error then names it
  const std::string path(self, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "crun-keeper";
}

Keeper::Keeper(const std::string& program, std::string cgroup_dir, std::string marker, std::string run_dir)
    : cgroup_dir_(std::move(cgroup_dir)) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "keeper pipe");
  std::string path = program;
  char* argv[] = {path.data(), cgroup_dir_.data(), marker.data(), run_dir.data(), nullptr};
  try {
    pid_ = spawn_keeper(program, p[0], argv);
  } catch (...) {
    ::close(p[0]);
    ::close(p[1]);
    throw;
  }
  ::close(p[0]);
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));  // close-on-exec by definition
  if (pidfd_ < 0) {
    const int e = errno;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(p[1]);
    throw std::system_error(e, std::generic_category(), "pidfd_open of the keeper");
  }
  pipe_ = p[1];
  ::fcntl(pipe_, F_SETFL, ::fcntl(pipe_, F_GETFL) | O_NONBLOCK);  // never block the event loop
}

Keeper::~Keeper() { finish(); }

void Keeper::send(int message) {
  // A full pipe (a keeper that does not read) drops the message: the marker scan still finds
  // the processes. A dead keeper is reported through pidfd().
  if (pipe_ >= 0) (void)!::write(pipe_, &message, sizeof(message));
}

void Keeper::worker_started(int pid) { send(pid); }

void Keeper::group_over() { send(kKeeperGroupOver); }

bool Keeper::remove_if_agent_dies(const std::string& dir) {
  const int n = static_cast<int>(dir.size());
  if (pipe_ < 0 || n < 1 || n > kKeeperMaxPath) return false;
  std::string message(2 * sizeof(int), '\0');
  std::memcpy(message.data(), &kKeeperRemoveTree, sizeof(int));
  std::memcpy(message.data() + sizeof(int), &n, sizeof(int));
  message += dir;
  return ::write(pipe_, message.data(), message.size()) == static_cast<ssize_t>(message.size());
}

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
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  if (!clean && !cgroup_dir_.empty()) kill_and_remove_cgroup(cgroup_dir_.c_str(), 1000);
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
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
  return describe(info);
}

}  // namespace crun
