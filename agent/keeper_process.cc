#include "agent/keeper_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "agent/job_cgroup.h"
#include "base/raw_syscall.h"
#include "base/remove_tree.h"

namespace crun {
namespace {

constexpr int kCleanupMs = 10000;  // how long the keeper waits for the job's processes to end
constexpr int kMaxScans = 50;

long now_ms() {
  timespec ts{};
  raw_syscall(SYS_clock_gettime, CLOCK_MONOTONIC, raw_arg(&ts));
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void say(const char* a, const char* b = "", const char* c = "") {
  for (const char* s : {"crun-keeper: ", a, b, c, "\n"}) raw_write(2, s, std::strlen(s));
}

// True when /proc/<pid>/environ has the entry `marker` exactly.
bool environ_has(const char* pid, const char* marker, std::size_t marker_len) {
  char path[64] = "/proc/";
  const std::size_t n = std::strlen(pid);
  if (n > 20) return false;
  std::memcpy(path + 6, pid, n);
  std::memcpy(path + 6 + n, "/environ", 9);
  const int fd = raw_open(path, O_RDONLY);
  if (fd < 0) return false;
  char buf[4096];
  std::size_t matched = 0;
  bool candidate = true;  // the current entry still equals marker[0, matched)
  bool found = false;
  while (!found) {
    const long got = raw_read(fd, buf, sizeof(buf));
    if (got == -EINTR) continue;
    if (got <= 0) break;
    for (long i = 0; i < got && !found; ++i) {
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
  raw_close(fd);
  return found;
}

// SIGKILLs every process (but this one) whose environment has `marker`; returns how many.
int kill_marked(const char* marker, std::size_t marker_len) {
  const int dir = raw_open("/proc", O_RDONLY | O_DIRECTORY);
  if (dir < 0) return 0;
  const int self = raw_getpid();
  int killed = 0;
  alignas(dirent64) char buf[16384];
  for (;;) {
    const long n = raw_syscall(SYS_getdents64, dir, raw_arg(buf), sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const dirent64*>(buf + off);
      off += d->d_reclen;
      int pid = 0;
      const char* c = d->d_name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0 || pid == self) continue;
      if (environ_has(d->d_name, marker, marker_len) && raw_kill(pid, SIGKILL) == 0) ++killed;
    }
  }
  raw_close(dir);
  return killed;
}

// The agent's run directory and all it holds; says so when some of it stays.
void remove_run_dir(const char* path) {
  const int err = remove_tree(path);
  if (err < 0) say("cannot remove the run directory ", path, err == -ELOOP ? " (nested too deep)" : "");
}

// The agent is gone: kill every process of the job, then leave.
void clean_up(bool agent_died, const KeeperJob& job) {
  if (job.cgroup_dir[0] != '\0') {
    const int err = kill_and_remove_cgroup(job.cgroup_dir, kCleanupMs);
    if (err != 0) say("cannot empty and remove ", job.cgroup_dir, err == EBUSY ? " (still populated)" : "");
  }
  if (!agent_died) return;  // the agent killed and reaped its workers' trees itself
  // Also with the cgroup: a process root moved out of it still has its group or the marker.
  const int groups = __atomic_load_n(&job.group_count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < groups; ++i) raw_kill(-job.groups[i], SIGKILL);
  const std::size_t marker_len = std::strlen(job.marker);
  const long deadline = now_ms() + kCleanupMs;
  bool quiet = false;
  for (int scan = 0; scan < kMaxScans && now_ms() < deadline && !quiet; ++scan) quiet = kill_marked(job.marker, marker_len) == 0;
  if (!quiet) say("processes marked ", job.marker, " were still being killed when the keeper gave up");
  if (job.run_dir[0] != '\0') remove_run_dir(job.run_dir);
}

// glibc passes argv to constructors: a program that links the agent is the keeper when asked. A
// `--crun-keeper` command line never reaches main(): were it a program's normal run, a keeper
// started from it would start keepers of its own, without end.
__attribute__((constructor)) void run_keeper_if_asked(int argc, char** argv, char**) {
  if (argc < 2 || std::strcmp(argv[1], kKeeperFlag) != 0) return;
  run_keeper(argc, argv);
  say("not started by a crun agent (expected --crun-keeper <cgroup dir> CRUN_AGENT_ID=<id> <run dir>, a pipe at 3)");
  ::_exit(2);
}

}  // namespace

std::string keeper_program() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string path(self, static_cast<std::size_t>(n));
    path = path.substr(0, path.rfind('/') + 1) + "crun-keeper";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "/proc/self/exe";
}

bool make_keeper_job(KeeperJob& job, const char* cgroup_dir, const char* marker, const char* run_dir) {
  const std::size_t dir_len = std::strlen(cgroup_dir), marker_len = std::strlen(marker), run_len = std::strlen(run_dir);
  if (dir_len >= sizeof(job.cgroup_dir) || marker_len >= sizeof(job.marker) || run_len >= sizeof(job.run_dir)) return false;
  std::memcpy(job.cgroup_dir, cgroup_dir, dir_len + 1);
  std::memcpy(job.marker, marker, marker_len + 1);
  std::memcpy(job.run_dir, run_dir, run_len + 1);
  job.group_count = 0;
  job.finished = 0;
  return true;
}

void apply_keeper_message(KeeperJob& job, int message) {
  const int count = __atomic_load_n(&job.group_count, __ATOMIC_RELAXED);
  if (message == kKeeperGroupOver) {
    __atomic_store_n(&job.group_count, 0, __ATOMIC_RELEASE);
  } else if (message == kKeeperFinish) {
    __atomic_store_n(&job.finished, 1, __ATOMIC_RELEASE);
  } else if (message > 0 && count < KeeperJob::kMaxGroups) {
    job.groups[count] = message;  // the entry first, then the count that covers it
    __atomic_store_n(&job.group_count, count + 1, __ATOMIC_RELEASE);
  }
}

void keeper_main(KeeperJob& job) {
  raw_syscall(SYS_prctl, PR_SET_NAME, raw_arg("crun-keeper"));
  char buf[4096];
  std::size_t have = 0;
  for (;;) {
    const long n = raw_read(kKeeperPipeFd, buf + have, sizeof(buf) - have);
    if (n == -EINTR) continue;
    if (n <= 0) break;  // end of file: the agent finished or died
    have += static_cast<std::size_t>(n);
    std::size_t used = 0;
    for (; have - used >= sizeof(int); used += sizeof(int)) {
      int message;
      std::memcpy(&message, buf + used, sizeof(int));
      apply_keeper_message(job, message);
    }
    std::memmove(buf, buf + used, have - used);
    have -= used;
  }
  clean_up(__atomic_load_n(&job.finished, __ATOMIC_ACQUIRE) == 0, job);
  raw_exit(0);
}

int run_keeper(int argc, char** argv) {
  if (argc != 5 || std::strcmp(argv[1], kKeeperFlag) != 0) return 2;
  if (std::strncmp(argv[3], kKeeperMarkerPrefix, sizeof(kKeeperMarkerPrefix) - 1) != 0) return 2;
  struct stat st;
  if (::fstat(kKeeperPipeFd, &st) != 0 || !S_ISFIFO(st.st_mode)) return 2;
  static KeeperJob job;  // a program of its own: this process's memory
  if (!make_keeper_job(job, argv[2], argv[3], argv[4])) return 2;
  keeper_main(job);
}

}  // namespace crun
