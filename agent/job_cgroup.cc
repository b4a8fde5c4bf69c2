#include "agent/job_cgroup.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "agent/file_text.h"

namespace crun {
namespace {

// mountinfo escapes blanks and backslashes in paths as octal (\040).
std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// `dir` + `own` without a trailing '/', when its cgroup.procs is writable; else empty.
std::string writable_parent(const std::string& dir, const std::string& own) {
  std::string parent = dir + own;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  return ::access((parent + "/cgroup.procs").c_str(), W_OK) == 0 ? parent : std::string();
}

// The agent's cgroup directory under the first cgroup v2 mount in /proc/self/mountinfo that shows
// it and where it is writable (a mount hidden by another one fails the test and the next is
// tried); empty when there is none.
std::string parent_from_mountinfo(const std::string& own) {
  std::istringstream in(read_text_file("/proc/self/mountinfo").value_or(""));
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent_id, dev, root, mount;
    if (!(fields >> id >> parent_id >> dev >> root >> mount)) continue;
    root = unescape(root);
    std::string below = own;
    if (root != "/") {  // a mount of a subtree: our cgroup must lie inside it
      if (own.compare(0, root.size(), root) != 0 || (own.size() > root.size() && own[root.size()] != '/')) continue;
      below = own.substr(root.size());
    }
    if (std::string parent = writable_parent(unescape(mount), below); !parent.empty()) return parent;
  }
  return {};
}

// The agent's own cgroup v2 path ("0::<path>" in /proc/self/cgroup).
std::string own_cgroup() {
  std::istringstream in(read_text_file("/proc/self/cgroup").value_or(""));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return {};
}

bool is_cgroup2(const char* path) {
  struct statfs fs {};
  return ::statfs(path, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

// The agent's cgroup directory where the hierarchy is mounted whole at one of its usual places
// (/sys/fs/cgroup; /sys/fs/cgroup/unified beside v1 on hybrid systems) and the directory is
// writable: a statfs each, where reading /proc/self/mountinfo makes the kernel print every mount
// (~50 us of a joiner's CPU, more when 1,024 agents start at once). Empty otherwise (also for a
// mount of a subtree, which does not hold the agent's own path): the caller reads mountinfo.
std::string usual_parent(const std::string& own) {
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (is_cgroup2(mount)) return writable_parent(mount, own);
  }
  return {};
}

std::string first_line(const std::string& path) {
  const std::string text = read_text_file(path).value_or("");
  return text.substr(0, text.find('\n'));
}

long now_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create(const std::string& agent_id) {
  const std::string own = own_cgroup();
  if (own.empty()) return nullptr;
  std::string parent = usual_parent(own);
  if (parent.empty()) parent = parent_from_mountinfo(own);
  if (parent.empty()) return nullptr;
  const std::string dir = parent + "/crun-" + agent_id;
  if (::mkdir(dir.c_str(), 0755) != 0) return nullptr;
  // A threaded subtree, or a kernel without cgroup.kill (before 5.14): not usable.
  if (::access((dir + "/cgroup.kill").c_str(), W_OK) != 0 || first_line(dir + "/cgroup.type") != "domain") {
    ::rmdir(dir.c_str());
    return nullptr;
  }
  const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || dir_fd < 0) {
    if (fd >= 0) ::close(fd);
    if (dir_fd >= 0) ::close(dir_fd);
    ::rmdir(dir.c_str());
    return nullptr;
  }
  return std::unique_ptr<JobCgroup>(new JobCgroup(dir, fd, dir_fd));
}

JobCgroup::~JobCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  if (!keeper_removes_) ::rmdir(dir_.c_str());  // never removes a populated one
}

bool kill_and_remove_cgroup(const char* dir, int timeout_ms) {
  // An empty cgroup (every normal end) goes at once: rmdir refuses a populated one (EBUSY).
  if (::rmdir(dir) == 0) return true;
  if (errno != EBUSY) return false;
  const std::string path = dir;
  const int events = ::open((path + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (events < 0) return false;
  const long deadline = now_ms() + timeout_ms;
  bool killed = false;
  bool empty = false;
  int err = 0;
  for (;;) {
    char buf[256];
    const ssize_t n = ::pread(events, buf, sizeof(buf) - 1, 0);
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    buf[n] = '\0';
    empty = std::strstr(buf, "populated 0") != nullptr;
    if (empty) break;
    if (!killed) {  // populated: kill everything in it (an agent's normal end finds it empty)
      killed = true;
      const int kill_fd = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
      const ssize_t wrote = kill_fd < 0 ? -1 : ::write(kill_fd, "1", 1);
      if (wrote != 1) err = wrote < 0 ? errno : EIO;
      if (kill_fd >= 0) ::close(kill_fd);
      if (err != 0) break;
      continue;
    }
    // Killed processes leave the cgroup as they exit: cgroup.events signals POLLPRI on a change.
    const long left = deadline - now_ms();
    if (left <= 0) break;
    pollfd p{events, POLLPRI, 0};
    ::poll(&p, 1, static_cast<int>(left));
  }
  ::close(events);
  if (err == 0 && !empty) err = EBUSY;
  if (err != 0) {
    errno = err;
    return false;
  }
  return ::rmdir(dir) == 0;
}

}  // namespace crun
