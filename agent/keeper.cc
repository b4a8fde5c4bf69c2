#include "agent/keeper.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "agent/job_cgroup.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace crun {
namespace {

// Messages on the pipe, one int each: a worker's pid, or one of these.
constexpr int kGroupOver = 0;
constexpr int kFinish = -1;

constexpr int kCleanupMs = 10000;  // how long the keeper waits for the job's processes to end
constexpr int kMaxScans = 50;

// The keeper's state, in its own copy of memory after fork: no allocation.
constexpr int kMaxGroups = 4096;
int g_groups[kMaxGroups];
int g_group_count = 0;

long now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void say(const char* a, const char* b = "", const char* c = "") {
  for (const char* s : {"crun-keeper: ", a, b, c, "\n"}) (void)!::write(2, s, std::strlen(s));
}

// True when /proc/<pid>/environ has the entry `marker` exactly.
bool environ_has(const char* pid, const char* marker, std::size_t marker_len) {
  char path[64] = "/proc/";
  const std::size_t n = std::strlen(pid);
  if (n > 20) return false;
  std::memcpy(path + 6, pid, n);
  std::memcpy(path + 6 + n, "/environ", 9);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  std::size_t matched = 0;
  bool candidate = true;  // the current entry still equals marker[0, matched)
  bool found = false;
  while (!found) {
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    for (ssize_t i = 0; i < got && !found; ++i) {
      const char c = buf[i];
      if (c == '\0') {
        found = candidate && matched == marker_len;
        matched = 0;
        candidate = true;
      } else if (candidate) {
        if (matched < marker_len && c == marker[matched]) ++matched;
        else candidate = false;
      }
    }
  }
  ::close(fd);
  return found;
}

// SIGKILLs every process (but this one) whose environment has `marker`; returns how many.
int kill_marked(const char* marker, std::size_t marker_len) {
  const int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  const pid_t self = ::getpid();
  int killed = 0;
  alignas(dirent64) char buf[16384];
  for (;;) {
    const ssize_t n = ::getdents64(dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* d = reinterpret_cast<const dirent64*>(buf + off);
      off += d->d_reclen;
      pid_t pid = 0;
      const char* c = d->d_name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0 || pid == self) continue;
      if (environ_has(d->d_name, marker, marker_len) && ::kill(pid, SIGKILL) == 0) ++killed;
    }
  }
  ::close(dir);
  return killed;
}

// The agent is gone: kill every process of the job, then leave.
void clean_up(bool agent_died, const char* cgroup_dir, const char* marker, std::size_t marker_len) {
  if (cgroup_dir != nullptr) {
    const int err = kill_and_remove_cgroup(cgroup_dir, kCleanupMs);
    if (err != 0) say("cannot empty and remove ", cgroup_dir, err == EBUSY ? " (still populated)" : "");
    return;
  }
  if (!agent_died) return;  // the agent killed and reaped its workers' trees itself
  for (int i = 0; i < g_group_count; ++i) ::kill(-g_groups[i], SIGKILL);
  const long deadline = now_ms() + kCleanupMs;
  for (int scan = 0; scan < kMaxScans && now_ms() < deadline; ++scan) {
    if (kill_marked(marker, marker_len) == 0) return;
  }
  say("processes marked ", marker, " were still being killed when the keeper gave up");
}

[[noreturn]] void keeper_main(int in, const char* cgroup_dir, const char* marker) {
  ::prctl(PR_SET_NAME, "crun-keeper");
  // The agent's handlers must not run here; the terminal's and a scheduler's signals are the
  // agent's to act on (it ends the keeper itself), so the keeper ignores them.
  for (int s = 1; s < NSIG; ++s) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (int ignored : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN,
                        SIGTTOU}) {
      if (s == ignored) sa.sa_handler = SIG_IGN;
    }
    ::sigaction(s, &sa, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  (void)!::chdir("/");
  // Keep stderr (for a failed clean-up) and the pipe; nothing else of the agent's.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
  }
  if (in > 3) ::close_range(3, static_cast<unsigned>(in) - 1, 0);
  ::close_range(static_cast<unsigned>(in) + 1, ~0U, 0);

  bool finished = false;
  char buf[4096];
  std::size_t have = 0;
  for (;;) {
    const ssize_t n = ::read(in, buf + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the agent finished or died
    have += static_cast<std::size_t>(n);
    std::size_t used = 0;
    for (; have - used >= sizeof(int); used += sizeof(int)) {
      int message;
      std::memcpy(&message, buf + used, sizeof(int));
      if (message == kGroupOver) g_group_count = 0;
      else if (message == kFinish) finished = true;
      else if (message > 0 && g_group_count < kMaxGroups) g_groups[g_group_count++] = message;
    }
    std::memmove(buf, buf + used, have - used);
    have -= used;
  }
  clean_up(!finished, cgroup_dir, marker, std::strlen(marker));
  ::_exit(0);
}

std::string describe(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with code " + std::to_string(info.si_status);
  return "killed by signal " + std::to_string(info.si_status);
}

}  // namespace

Keeper::Keeper(std::string cgroup_dir, std::string marker)
    : cgroup_dir_(std::move(cgroup_dir)), marker_(std::move(marker)) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "keeper pipe");
  const char* dir = cgroup_dir_.empty() ? nullptr : cgroup_dir_.c_str();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(p[1]);
    keeper_main(p[0], dir, marker_.c_str());
  }
  const int fork_errno = errno;
  ::close(p[0]);
  if (pid_ < 0) {
    ::close(p[1]);
    throw std::system_error(fork_errno, std::generic_category(), "fork of the keeper");
  }
  pipe_ = p[1];
  ::fcntl(pipe_, F_SETFL, ::fcntl(pipe_, F_GETFL) | O_NONBLOCK);  // never block the event loop
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));  // close-on-exec by definition
  if (pidfd_ < 0) {
    const int e = errno;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(pipe_);
    throw std::system_error(e, std::generic_category(), "pidfd_open of the keeper");
  }
}

Keeper::~Keeper() { finish(); }

void Keeper::send(int message) {
  if (pipe_ < 0) return;
  // A full pipe (a keeper that does not read) drops the message: the marker scan still finds
  // the processes. A dead keeper is reported through pidfd().
  (void)!::write(pipe_, &message, sizeof(message));
}

void Keeper::worker_started(int pid) { send(pid); }

void Keeper::group_over() { send(kGroupOver); }

void Keeper::finish() {
  if (finished_) return;
  finished_ = true;
  bool clean = false;
  if (pid_ > 0) {
    send(kFinish);
    ::close(pipe_);
    pipe_ = -1;
    pollfd p{pidfd_, POLLIN, 0};
    int r;
    while ((r = ::poll(&p, 1, kCleanupMs + 1000)) < 0 && errno == EINTR) {
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
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
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
