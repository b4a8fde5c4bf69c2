// RunDirectory: the agent's run directory and its layout: attempt_<N>/<local_rank>/ for each
// worker of each start of the group (error.json, the logs, the heartbeat file, `control`: the
// worker's CRUN_CONTROL_FILE, agent/control_file.h),
// attempt_<N>/filtered_std{out,err}.log, the file timer's FIFO and failure_report.json.
//
// Contract
//   - keeps_worker_logs(redirects, tee): whether any local rank's stream goes to a file.
//   - temporary_run_base(tmpdir, runtime_dir, holds_logs, writable): where a temporary run
//     directory goes (no --log-dir), and why: `tmpdir` when set (TMPDIR, the user's choice, as
//     torchrun's tempfile); else, when it holds no logs, only small runtime files, a tmpfs: the
//     first of `runtime_dir` (XDG_RUNTIME_DIR, an absolute path) and /dev/shm that `writable`
//     says this user may write (a directory there takes ~10 us to make and remove, on an ext4
//     /tmp ~110 us, and a job of two workers makes four); else /tmp. Pure: the launcher calls it
//     with the environment and the host's answer, so --print-config shows the choice.
//   - RunDirectory::make(log_dir, temp_dir, run_id, holds_logs): with a log_dir,
//     <absolute log_dir>/<run_id>_XXXXXX (absolute: workers may chdir), kept; else
//     <temp_dir>/crun-<run_id>-XXXXXX, temporary (removed at the agent's exit, or by its keeper
//     when the agent dies) unless it holds logs. A '/' in the run id becomes '_'. Parents are
//     created; throws std::system_error naming the path when it cannot be made.
//   - attempt_dir / attempt_file / report_file / control_file: paths only, nothing made.
//   - remove(): removes the tree (base/remove_tree.h), whatever `temporary` says.
//
// Threading
//   Pure functions and a plain value; make() and remove() touch the file system on the caller's
//   thread (the agent's).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace crun {

bool keeps_worker_logs(const std::vector<unsigned>& redirects, const std::vector<unsigned>& tee);

struct RunBase {
  std::string dir;
  std::string why;  // "TMPDIR", "XDG_RUNTIME_DIR", "/dev/shm: a tmpfs", "default"
};

RunBase temporary_run_base(const std::optional<std::string>& tmpdir, const std::optional<std::string>& runtime_dir,
                           bool holds_logs, const std::function<bool(const std::string& dir)>& writable);

class RunDirectory {
 public:
  static RunDirectory make(const std::string& log_dir, const std::string& temp_dir, const std::string& run_id,
                           bool holds_logs);
  RunDirectory() = default;

  const std::filesystem::path& path() const { return path_; }
  bool temporary() const { return temporary_; }
  std::filesystem::path attempt_dir(int restart_count, int local_rank) const;
  std::filesystem::path attempt_file(int restart_count, const std::string& name) const;
  std::filesystem::path report_file() const { return path_ / "failure_report.json"; }
  std::filesystem::path control_file(int restart_count, int local_rank) const {
    return attempt_dir(restart_count, local_rank) / "control";
  }
  void remove() const;

 private:
  std::filesystem::path path_;
  bool temporary_ = false;
};

}  // namespace crun
