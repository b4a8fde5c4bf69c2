#include "agent/run_directory.h"

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "base/remove_tree.h"

namespace crun {

namespace fs = std::filesystem;

namespace {

// Makes "<base>/<prefix>XXXXXX" and returns it.
fs::path make_unique_dir(const fs::path& base, std::string prefix) {
  for (char& c : prefix) {
    if (c == '/') c = '_';  // a run id is not a path
  }
  fs::create_directories(base);
  std::string templ = (base / (prefix + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
  }
  return templ;
}

}  // namespace

bool keeps_worker_logs(const std::vector<unsigned>& redirects, const std::vector<unsigned>& tee) {
  for (unsigned bits : redirects) {
    if (bits != 0) return true;
  }
  for (unsigned bits : tee) {
    if (bits != 0) return true;
  }
  return false;
}

RunBase temporary_run_base(const std::optional<std::string>& tmpdir, const std::optional<std::string>& runtime_dir,
                           bool holds_logs, const std::function<bool(const std::string& dir)>& writable) {
  if (tmpdir && !tmpdir->empty()) return {*tmpdir, "TMPDIR"};
  if (!holds_logs && writable) {
    if (runtime_dir && runtime_dir->starts_with('/') && writable(*runtime_dir)) return {*runtime_dir, "XDG_RUNTIME_DIR"};
    if (writable("/dev/shm")) return {"/dev/shm", "/dev/shm: a tmpfs"};
  }
  return {"/tmp", "default"};
}

RunDirectory RunDirectory::make(const std::string& log_dir, const std::string& temp_dir, const std::string& run_id,
                                bool holds_logs) {
  RunDirectory d;
  if (log_dir.empty()) {
    d.path_ = make_unique_dir(temp_dir.empty() ? "/tmp" : temp_dir, "crun-" + run_id + "-");
    d.temporary_ = !holds_logs;
  } else {
    d.path_ = make_unique_dir(fs::absolute(log_dir), run_id + "_");
  }
  return d;
}

fs::path RunDirectory::attempt_dir(int restart_count, int local_rank) const {
  return path_ / ("attempt_" + std::to_string(restart_count)) / std::to_string(local_rank);
}

fs::path RunDirectory::attempt_file(int restart_count, const std::string& name) const {
  return path_ / ("attempt_" + std::to_string(restart_count)) / name;
}

void RunDirectory::remove() const {
  if (!path_.empty()) remove_tree(path_.c_str());
}

}  // namespace crun
