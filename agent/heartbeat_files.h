// HeartbeatFiles: the heartbeat files of one worker group (base/heartbeat_file.h), made and read
// by the agent; and what /proc says about a worker the watchdog stops.
//
// Contract
//   - make(local_rank, path) creates (or truncates) `path` as kHeartbeatFileBytes zero bytes, mode
//     0600, keeps a close-on-exec descriptor to it and returns the path; throws std::system_error
//     naming the path when it cannot. read(local_rank) reads it now (nullopt: not made, or not
//     whole). The destructor closes the descriptors; the files stay in the attempt's directory.
//   - process_state(pid) describes the process from /proc: "state S (sleeping), waiting in
//     hrtimer_nanosleep"; "" when /proc has no such process.
//
// Threading
//   One thread (the agent's event loop).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/heartbeat_file.h"

namespace crun {

class HeartbeatFiles {
 public:
  explicit HeartbeatFiles(int nproc);
  ~HeartbeatFiles();
  HeartbeatFiles(const HeartbeatFiles&) = delete;
  HeartbeatFiles& operator=(const HeartbeatFiles&) = delete;

  std::string make(int local_rank, const std::string& path);
  std::optional<Heartbeat> read(int local_rank) const;

 private:
  std::vector<int> fds_;
};

std::string process_state(int pid);

}  // namespace crun
