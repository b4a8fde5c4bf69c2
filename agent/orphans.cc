#include "agent/orphans.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "agent/file_text.h"

namespace crun {

namespace asio = boost::asio;

namespace {

// Reaps `pid` if it has exited (never blocks).
void reap_pid(int pid) {
  siginfo_t info;
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG) != 0 && errno == EINTR) {
  }
}

}  // namespace

std::vector<int> own_children() {
  std::vector<int> pids;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return pids;
  while (dirent* t = ::readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    const std::string list = read_text_file(std::string("/proc/self/task/") + t->d_name + "/children").value_or("");
    const char* p = list.c_str();
    while (*p != '\0') {
      char* end = nullptr;
      const long pid = std::strtol(p, &end, 10);
      if (end == p) break;
      if (pid > 0) pids.push_back(static_cast<int>(pid));
      p = end;
    }
  }
  ::closedir(tasks);
  return pids;
}

struct Orphans::Impl {
  explicit Impl(asio::io_context& io) : sigchld(io) {}

  asio::signal_set sigchld;
  std::vector<int> tracked;

  bool is_tracked(int pid) const { return std::find(tracked.begin(), tracked.end(), pid) != tracked.end(); }

  void wait_sigchld() {
    sigchld.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      reap();
      wait_sigchld();
    });
  }

  void reap() {
    for (int i = 0; i < 4096; ++i) {  // bounded: each turn reaps one
      siginfo_t info;
      std::memset(&info, 0, sizeof(info));
      // Look without reaping: a tracked child's status belongs to its owner.
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      if (is_tracked(info.si_pid)) return;  // its owner reaps it, then calls reap() again
      reap_pid(info.si_pid);
    }
  }
};

Orphans::Orphans(asio::io_context& io) : impl_(std::make_unique<Impl>(io)) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw std::system_error(errno, std::generic_category(), "PR_SET_CHILD_SUBREAPER");
  }
  impl_->sigchld.add(SIGCHLD);
  // Asio installs its handler without flags: SIGCHLD comes at every worker exit and may land on
  // any thread, so let interrupted system calls restart, and skip stop/continue notices.
  struct sigaction sa;
  if (::sigaction(SIGCHLD, nullptr, &sa) == 0) {
    sa.sa_flags |= SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, nullptr);
  }
  impl_->wait_sigchld();
}

Orphans::~Orphans() {
  boost::system::error_code ignored;
  impl_->sigchld.cancel(ignored);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

void Orphans::track(int pid) { impl_->tracked.push_back(pid); }

void Orphans::untrack(int pid) {
  auto& t = impl_->tracked;
  t.erase(std::remove(t.begin(), t.end(), pid), t.end());
}

void Orphans::reap() { impl_->reap(); }

void Orphans::kill_untracked(std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + bound;
  for (int round = 0; round < 64; ++round) {
    std::vector<int> victims = own_children();
    victims.erase(std::remove_if(victims.begin(), victims.end(), [&](int pid) { return impl_->is_tracked(pid); }),
                  victims.end());
    if (victims.empty()) break;
    for (int pid : victims) ::kill(pid, SIGKILL);
    // Wait for each to end: only then have its own children been re-parented to us.
    for (int pid : victims) {
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (fd >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        pollfd p{fd, POLLIN, 0};
        if (left > 0) ::poll(&p, 1, static_cast<int>(left));
        ::close(fd);
      }
      reap_pid(pid);
    }
    if (Clock::now() >= deadline) break;
  }
  impl_->reap();
}

}  // namespace crun
