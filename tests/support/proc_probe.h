// proc_probe: what the fault tests read about a running process from /proc, and a timestamped
// "measured:" line for the figures in docs/reliability.md.
//
// Contract
//   rss_kib()/fd_count() return -1 when the process is gone. pids_in() extracts "<key>=<pid>"
//   numbers from output lines starting with `prefix`. measured() prints one line to stdout:
//   "measured: <what> <ms> ms" (tests/faults/measure.py collects them over runs).
//
// Threading
//   Free functions; any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace crun::test {

long rss_kib(pid_t pid);
int fd_count(pid_t pid);
// Every "<key>=<number>" on lines that start with `prefix`, in order.
std::vector<pid_t> pids_in(const std::string& text, const std::string& prefix, const std::string& key);
// True when every pid in `pids` has ended within `bound` (zombies count as ended).
bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds bound);
// SIGKILLs each pid in `pids` still running a command line that contains `command` (a failed
// test's leftovers; the check keeps a recycled pid safe).
void kill_leftovers(const std::vector<pid_t>& pids, const std::string& command);

using SteadyClock = std::chrono::steady_clock;
double ms_since(SteadyClock::time_point t0);
void measured(const std::string& what, double ms);
// "measured: <what> <kib> KiB".
void measured_kib(const std::string& what, long kib);

}  // namespace crun::test
