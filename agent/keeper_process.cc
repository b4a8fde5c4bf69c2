#include "agent/keeper_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "agent/file_text.h"
#include "agent/job_cgroup.h"
#include "base/log.h"
#include "base/remove_tree.h"

namespace crun {
namespace {

constexpr int kCleanupMs = 10000;  // how long the keeper waits for the job's processes to end
constexpr int kMaxScans = 50;
constexpr int kIgnoredSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
                                   SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};

// What the agent told the keeper.
struct Job {
  std::string cgroup_dir;  // "" for none
  std::string marker;
  std::string run_dir;  // removed if the agent dies; "" for none
  std::vector<std::string> trees;  // kKeeperRemoveTree's: removed too if the agent dies
  std::vector<int> groups;
  bool finished = false;  // the agent said it ends normally
};

long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Signals, descriptors and directory as the contract says.
void settle() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int s : kIgnoredSignals) ::sigaction(s, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  (void)!::chdir("/");
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    if (null > kKeeperPipeFd) ::close(null);
  }
  ::close_range(kKeeperPipeFd + 1, ~0U, 0);
}

// Applies the agent's messages until the pipe's end-of-file.
void read_messages(Job& job) {
  char buf[8192];  // more than the longest message (kKeeperRemoveTree's)
  std::size_t have = 0;
  for (;;) {
    const ssize_t n = ::read(kKeeperPipeFd, buf + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // end of file: the agent finished or died
    have += static_cast<std::size_t>(n);
    std::size_t used = 0;
    for (; have - used >= sizeof(int); used += sizeof(int)) {
      int message;
      std::memcpy(&message, buf + used, sizeof(int));
      if (message == kKeeperRemoveTree) {  // then the length and the path, written with it at once
        int n = 0;
        if (have - used < 2 * sizeof(int)) break;
        std::memcpy(&n, buf + used + sizeof(int), sizeof(int));
        if (n < 1 || n > kKeeperMaxPath) return;  // not the agent's: stop reading, clean up
        if (have - used < 2 * sizeof(int) + static_cast<std::size_t>(n)) break;
        job.trees.emplace_back(buf + used + 2 * sizeof(int), static_cast<std::size_t>(n));
        used += sizeof(int) + static_cast<std::size_t>(n);
        continue;
      }
      if (message == kKeeperGroupOver) job.groups.clear();
      else if (message == kKeeperFinish) job.finished = true;
      else if (message > 0) job.groups.push_back(message);
    }
    std::memmove(buf, buf + used, have - used);
    have -= used;
  }
}

// True when /proc/<pid>/environ has the entry `marker` exactly.
bool environ_has(const char* pid, std::string_view marker) {
  const auto text = read_text_file(std::string("/proc/") + pid + "/environ");
  if (!text) return false;
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\0');
    if (rest.substr(0, end) == marker) return true;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return false;
}

// SIGKILLs every process (but this one) whose environment has `marker`; returns how many.
int kill_marked(const std::string& marker) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  const pid_t self = ::getpid();
  int killed = 0;
  while (const dirent* d = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    if (environ_has(d->d_name, marker) && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  ::closedir(proc);
  return killed;
}

// The agent is gone: kill every process of the job, then leave.
void clean_up(const Job& job) {
  if (!job.cgroup_dir.empty()) {
    if (!kill_and_remove_cgroup(job.cgroup_dir.c_str(), kCleanupMs)) {
      log_line("cannot empty and remove " + job.cgroup_dir + (errno == EBUSY ? " (still populated)" : ""));
    }
  }
  if (job.finished) return;  // the agent killed and reaped its workers' trees itself
  // Also with the cgroup: a process root moved out of it still has its group or the marker.
  for (int group : job.groups) ::kill(-group, SIGKILL);
  const long deadline = now_ms() + kCleanupMs;
  bool quiet = false;
  for (int scan = 0; scan < kMaxScans && now_ms() < deadline && !quiet; ++scan) quiet = kill_marked(job.marker) == 0;
  if (!quiet) log_line("processes marked " + job.marker + " were still being killed when the keeper gave up");
  if (!job.run_dir.empty()) {
    if (!remove_tree(job.run_dir.c_str())) {
      const bool too_deep = errno == ELOOP;
      log_line("cannot remove the run directory " + job.run_dir + (too_deep ? " (nested too deep)" : ""));
    }
  }
  for (const auto& tree : job.trees) {
    if (!remove_tree(tree.c_str())) log_line("cannot remove " + tree + (errno == ELOOP ? " (nested too deep)" : ""));
  }
}

}  // namespace

int run_keeper(int argc, char** argv) {
  struct stat pipe_in;
  if (argc != 4 || std::strncmp(argv[2], kKeeperMarkerPrefix, sizeof(kKeeperMarkerPrefix) - 1) != 0 ||
      ::fstat(kKeeperPipeFd, &pipe_in) != 0 || !S_ISFIFO(pipe_in.st_mode)) {
    log_line("started by a crun agent only (expected <cgroup dir> CRUN_AGENT_ID=<id> <run dir>, the agent's pipe at 3)");
    return 2;
  }
  settle();
  Job job{argv[1], argv[2], argv[3], {}, {}, false};
  read_messages(job);
  clean_up(job);
  return 0;
}

}  // namespace crun
