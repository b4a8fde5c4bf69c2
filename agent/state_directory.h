// StateDirectory: state that outlives a worker. Each of this node's ranks gets a directory of
// its own, CRUN_STATE_DIR, kept across every restart of the group for the whole job, on a tmpfs
// by default; the agent keeps its own view of what each rank committed there.
//
// Contract
//   - Layout: one job root, job_root_for(root, run_id, pid) = <root>/crun-state-<run id>-<pid>
//     ('/' in the run id as '_'), mode 0700; under it rank-<global rank>/ (a worker's
//     CRUN_STATE_DIR, 0700), .committed/rank-<global rank>/<name> (hard links to the files that
//     were committed: a later rename over the worker's name does not change them) and replicas/
//     (reserved for state other nodes replicate to this one). The constructor makes the root
//     (and `root` itself if missing); a leftover job root of the same name owned by this user
//     (an agent of this pid that died with its keeper) is removed first; one not owned by this
//     user, or not a directory, throws std::system_error (and a root it made but could not
//     fill is removed first). It says in one line when `root` is not a tmpfs or ramfs (statfs).
//   - Commit protocol: a worker writes a file under a name starting with '.' and renames it to a
//     name that does not (agent/state_ledger.h is_state_name); that rename is the commit, seen by
//     inotify (IN_MOVED_TO) on the loop. Only regular files directly in the rank's directory
//     count. A commit that would bring the rank's committed bytes over `max_bytes` is refused:
//     one line, the new file removed, the previous committed version (if any) linked back under
//     its name; the job goes on. A committed name deleted or moved away leaves the committed
//     set. A committed file written in place afterwards (a write or truncation of its inode,
//     watched with IN_MODIFY) is dropped with one line: its bytes may be torn. Events are read
//     64 KiB at a time; on a queue overflow the ranks' directories are read again (one line).
//     When no inotify instance can be had (the user's fs.inotify.max_user_instances taken, as by
//     hundreds of agents on one host), one line says so and the directories are read at each
//     prepare_for_start and install instead (the state names there taken as commits, the bound
//     applied): commits are not seen as they happen, nor writes in place.
//   - committed(rank): the rank's committed files now (path: the .committed link), by name;
//     sequence(rank): +1 at each commit, drop or install (0: nothing yet). on_change(f): `f`
//     (one callback; a later call replaces it) after each accepted commit and each drop.
//   - install(rank, files, sequence): the rank's committed set becomes `files` (name, a file
//     the caller wrote under job_root()), each moved in; names that are not state names throw
//     std::invalid_argument; on_change is not called. Call it before the rank's start.
//   - prepare_for_start(ranks): first reads every pending event; then each rank's directory
//     (made if missing) holds exactly its committed files: anything else (dot-files, files
//     never committed, directories, links) removed, committed ones linked back.
//   - remove(): the job root and all it holds (base/remove_tree.h), the watch ended; at the
//     job's end. Its inotify descriptor is closed by a forked child that does nothing else (the
//     close waits for the kernel to free the watches, ~15 ms: neither the agent's end nor its
//     exit waits for it); the agent's subreaper reaps that child. The destructor removes
//     nothing (crun-keeper does when the agent dies).
//
// Threading
//   The agent's event-loop thread (`io`'s); the watch's handler runs there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace crun {

struct CommittedFile {
  int rank = 0;
  std::string name;
  std::filesystem::path path;  // the .committed link
  std::uint64_t size = 0;
  std::uint64_t sequence = 0;  // the rank's sequence when this version was committed
};

class StateDirectory {
 public:
  static std::filesystem::path job_root_for(const std::string& root, const std::string& run_id, int pid);
  static std::filesystem::path rank_dir_of(const std::filesystem::path& job_root, int rank);  // the path only

  StateDirectory(boost::asio::io_context& io, std::filesystem::path job_root, std::uint64_t max_bytes);
  ~StateDirectory();
  StateDirectory(const StateDirectory&) = delete;
  StateDirectory& operator=(const StateDirectory&) = delete;

  const std::filesystem::path& job_root() const;
  std::filesystem::path rank_dir(int rank);  // made (and watched) on demand
  std::vector<CommittedFile> committed(int rank) const;
  std::uint64_t sequence(int rank) const;
  std::uint64_t max_bytes() const;
  void on_change(std::function<void(int rank)> f);
  void install(int rank, std::vector<std::pair<std::string, std::filesystem::path>> files, std::uint64_t sequence);
  void prepare_for_start(const std::vector<int>& ranks);
  void remove();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
