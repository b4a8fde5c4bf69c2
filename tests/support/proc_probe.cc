#include "tests/support/proc_probe.h"

#include <dirent.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>

#include "tests/support/child_process.h"

namespace crun::test {

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

int fd_count(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

std::vector<pid_t> pids_in(const std::string& text, const std::string& prefix, const std::string& key) {
  std::vector<pid_t> pids;
  const std::regex re("\\b" + key + "=(\\d+)");
  for (const auto& line : lines(text)) {
    if (line.rfind(prefix, 0) != 0) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end; ++it) {
      pids.push_back(static_cast<pid_t>(std::stol((*it)[1])));
    }
  }
  return pids;
}

bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds bound) {
  const auto deadline = SteadyClock::now() + bound;
  for (pid_t p : pids) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (!wait_pid_gone(p, std::max(left, std::chrono::milliseconds(0)))) return false;
  }
  return true;
}

void kill_leftovers(const std::vector<pid_t>& pids, const std::string& command) {
  for (pid_t p : pids) {
    std::ifstream in("/proc/" + std::to_string(p) + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(command) != std::string::npos) ::kill(p, SIGKILL);
  }
}

double ms_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

void measured(const std::string& what, double ms) {
  std::printf("measured: %s %.1f ms\n", what.c_str(), ms);
  std::fflush(stdout);
}

void measured_kib(const std::string& what, long kib) {
  std::printf("measured: %s %ld KiB\n", what.c_str(), kib);
  std::fflush(stdout);
}

}  // namespace crun::test
