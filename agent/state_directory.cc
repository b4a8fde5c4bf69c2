#include "agent/state_directory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>

#include "agent/clone_on_stack.h"  // CRUN_SANITIZER_BUILD
#include "agent/state_ledger.h"
#include "base/log.h"
#include "base/remove_tree.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kEventBuffer = 64 * 1024;  // events read at a time
constexpr std::uint32_t kDirEvents = IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ONLYDIR;
constexpr std::uint32_t kFileEvents = IN_MODIFY;

[[noreturn]] void fail(const std::string& what, const fs::path& path) {
  throw std::system_error(errno, std::generic_category(), what + " " + path.string());
}

StateFileFacts facts_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size)};
}

// What `path` holds now, if a regular file (no link followed).
std::optional<StateFileFacts> regular_file(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return facts_of(st);
}

void make_private_dir(const fs::path& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) fail("cannot make the state directory", path);
}

std::string size_text(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// Closing an inotify descriptor whose watches were just removed waits for the kernel to free
// them (an SRCU grace period: ~15 ms here), and so would this process's exit. A child that holds
// the last reference takes that wait instead: it keeps only `fd` and a pipe, and lets go when the
// pipe closes, just after the agent closed its own copy. The agent's subreaper reaps it (or, once
// the agent has exited, whoever inherits it).
void close_in_background(int fd) {
#ifdef CRUN_SANITIZER_BUILD
  ::close(fd);  // the sanitizers' runtimes and a forked child of a threaded process: not worth it there
#else
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    ::close(fd);
    return;
  }
  const pid_t child = ::fork();
  if (child == 0) {  // system calls only
    sigset_t all;
    sigfillset(&all);
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, nullptr, sizeof(unsigned long));
    const unsigned lo = static_cast<unsigned>(std::min(fd, p[0])), hi = static_cast<unsigned>(std::max(fd, p[0]));
    if (lo > 0) ::syscall(SYS_close_range, 0U, lo - 1, 0U);
    if (hi > lo + 1) ::syscall(SYS_close_range, lo + 1, hi - 1, 0U);
    ::syscall(SYS_close_range, hi + 1, ~0U, 0U);
    char byte;
    while (::syscall(SYS_read, p[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::syscall(SYS_exit_group, 0);
  }
  ::close(fd);  // quick while the child holds a reference (no child: this close waits)
  ::close(p[0]);
  ::close(p[1]);  // the child lets go of the last reference now
#endif
}

}  // namespace

struct StateDirectory::Impl {
  Impl(asio::io_context& io, fs::path root, std::uint64_t max) : job_root(std::move(root)), max_bytes(max), watch(io) {}

  fs::path job_root;
  std::uint64_t max_bytes;
  asio::posix::stream_descriptor watch;  // the inotify descriptor
  StateLedger ledger;
  std::function<void(int)> changed;
  bool watching = false;  // false: no inotify instance could be had; the directories are read at each start
  std::set<int> ranks;    // every rank whose directory was made
  std::map<int, int> rank_of_dir;  // directory watch -> rank
  std::map<int, int> dir_of_rank;  // rank -> its directory's watch
  // A committed file's watch (one per inode) -> its inode and the names it is committed under.
  struct FileWatch {
    std::uint64_t inode = 0;
    std::vector<std::pair<int, std::string>> names;
  };
  std::map<int, FileWatch> files;
  bool removed = false;
  std::vector<char> events = std::vector<char>(kEventBuffer);  // new[]: aligned for inotify_event

  fs::path rank_path(int rank) const { return rank_dir_of(job_root, rank); }
  fs::path committed_dir(int rank) const { return job_root / ".committed" / ("rank-" + std::to_string(rank)); }

  void wait_events();
  void drain();
  void handle(const inotify_event& e);
  void on_renamed(int rank, const std::string& name);
  void on_gone(int rank, const std::string& name);
  void on_modified(int wd);
  void rescan();
  void watch_file(int rank, const std::string& name, const fs::path& link);
  void unwatch_file(int rank, const std::string& name);
  void drop(int rank, const std::string& name);
  fs::path make_rank_dir(int rank);
};

fs::path StateDirectory::job_root_for(const std::string& root, const std::string& run_id, int pid) {
  std::string id = run_id;
  for (char& c : id) {
    if (c == '/') c = '_';
  }
  return fs::path(root) / ("crun-state-" + id + "-" + std::to_string(pid));
}

fs::path StateDirectory::rank_dir_of(const fs::path& job_root, int rank) { return job_root / ("rank-" + std::to_string(rank)); }

StateDirectory::StateDirectory(asio::io_context& io, fs::path job_root, std::uint64_t max_bytes)
    : impl_(std::make_unique<Impl>(io, std::move(job_root), max_bytes)) {
  const fs::path& root = impl_->job_root;
  const fs::path base = root.parent_path();
  fs::create_directories(base);
  struct statfs sf;
  if (::statfs(base.c_str(), &sf) == 0 && sf.f_type != TMPFS_MAGIC && sf.f_type != RAMFS_MAGIC) {
    log_line("CRUN_STATE_ROOT " + base.string() + " is not a tmpfs or ramfs: the workers' CRUN_STATE_DIR is on disk there");
  }
  if (::mkdir(root.c_str(), 0700) != 0) {
    if (errno != EEXIST) fail("cannot make the state directory", root);
    struct stat st;
    if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      errno = EEXIST;
      fail("cannot make the state directory (there already, not this user's directory)", root);
    }
    // This pid's and run id's: left by an agent that died with its keeper. Nothing in it is ours.
    if (!remove_tree(root.c_str()) || ::mkdir(root.c_str(), 0700) != 0) fail("cannot make the state directory", root);
  }
  try {
    make_private_dir(root / ".committed");
    make_private_dir(root / "replicas");
  } catch (...) {
    remove_tree(root.c_str());  // nothing of a directory that cannot be used stays behind
    throw;
  }
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {  // EMFILE: the user's inotify instances (fs.inotify.max_user_instances) are all taken
    log_line(std::string("cannot watch the state directories (inotify: ") + std::strerror(errno) +
             "): what each rank's directory holds is read at each start of the group instead, and a file written "
             "in place after its commit is not seen");
    return;
  }
  impl_->watching = true;
  impl_->watch.assign(fd);
  impl_->wait_events();
}

StateDirectory::~StateDirectory() = default;

const fs::path& StateDirectory::job_root() const { return impl_->job_root; }
std::uint64_t StateDirectory::max_bytes() const { return impl_->max_bytes; }
std::uint64_t StateDirectory::sequence(int rank) const { return impl_->ledger.sequence(rank); }
void StateDirectory::on_change(std::function<void(int rank)> f) { impl_->changed = std::move(f); }
fs::path StateDirectory::rank_dir(int rank) { return impl_->make_rank_dir(rank); }

std::vector<CommittedFile> StateDirectory::committed(int rank) const {
  std::vector<CommittedFile> out;
  for (const auto& [name, entry] : impl_->ledger.committed(rank)) {
    out.push_back({rank, name, impl_->committed_dir(rank) / name, entry.facts.size, entry.sequence});
  }
  return out;
}

fs::path StateDirectory::Impl::make_rank_dir(int rank) {
  const fs::path dir = rank_path(rank);
  make_private_dir(dir);
  make_private_dir(job_root / ".committed");
  make_private_dir(committed_dir(rank));
  ranks.insert(rank);
  if (watching && !dir_of_rank.contains(rank)) {
    const int wd = ::inotify_add_watch(watch.native_handle(), dir.c_str(), kDirEvents);
    if (wd < 0) fail("cannot watch", dir);
    rank_of_dir[wd] = rank;
    dir_of_rank[rank] = wd;
  }
  return dir;
}

void StateDirectory::Impl::wait_events() {
  watch.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || removed) return;
    drain();
    wait_events();
  });
}

void StateDirectory::Impl::drain() {
  if (!watching) {
    rescan();
    return;
  }
  char* buf = events.data();
  for (;;) {
    const ssize_t n = ::read(watch.native_handle(), buf, events.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EAGAIN: nothing more now
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      handle(*e);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
}

void StateDirectory::Impl::handle(const inotify_event& e) {
  if (e.mask & IN_Q_OVERFLOW) {
    log_line("the state directories' watch overflowed; reading them again (" + job_root.string() + ")");
    rescan();
    return;
  }
  if (e.mask & IN_MODIFY) {
    on_modified(e.wd);
    return;
  }
  if (e.mask & IN_IGNORED) {  // a watched directory or file is gone
    files.erase(e.wd);
    if (auto it = rank_of_dir.find(e.wd); it != rank_of_dir.end()) {
      dir_of_rank.erase(it->second);
      rank_of_dir.erase(it);
    }
    return;
  }
  const auto dir = rank_of_dir.find(e.wd);
  if (dir == rank_of_dir.end() || e.len == 0) return;
  const std::string name(e.name);
  if (!is_state_name(name) || (e.mask & IN_ISDIR)) return;  // removed before the next start
  if (e.mask & IN_MOVED_TO) on_renamed(dir->second, name);
  else if (e.mask & (IN_MOVED_FROM | IN_DELETE)) on_gone(dir->second, name);
}

// The commit: whatever regular file the name holds now.
void StateDirectory::Impl::on_renamed(int rank, const std::string& name) {
  const fs::path path = rank_path(rank) / name;
  const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;  // gone again: its own event follows
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return;
  }
  const StateFileFacts facts = facts_of(st);
  const auto verdict = ledger.commit(rank, name, facts, max_bytes);
  if (verdict.verdict == StateLedger::Verdict::kSame) {
    ::close(fd);
    return;
  }
  const fs::path link = committed_dir(rank) / name;
  if (verdict.verdict == StateLedger::Verdict::kRefuse) {
    ::close(fd);
    const bool previous = ledger.committed(rank).contains(name);
    log_line("rank " + std::to_string(rank) + ": state file " + name + " (" + std::to_string(facts.size) +
             " bytes) refused: the rank's committed state would be " + std::to_string(verdict.needed) +
             " bytes, over --state-max-bytes " + size_text(max_bytes) +
             (previous ? "; the previous version is back" : "; there was no previous version"));
    if (auto now = regular_file(path); now && now->same_file(facts)) ::unlink(path.c_str());
    if (previous) (void)!::link(link.c_str(), path.c_str());  // EEXIST: a newer save took the name
    return;
  }
  // Accepted: the agent's own link to this inode, put in place with one rename.
  unwatch_file(rank, name);
  const fs::path incoming = committed_dir(rank) / ".incoming";
  ::unlink(incoming.c_str());
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const bool linked = ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, incoming.c_str(), AT_SYMLINK_FOLLOW) == 0 &&
                      ::rename(incoming.c_str(), link.c_str()) == 0;
  const int err = errno;
  ::close(fd);
  if (!linked) {
    log_line("rank " + std::to_string(rank) + ": cannot keep state file " + name + ": " + std::strerror(err));
    ledger.gone(rank, name, std::nullopt);
    ::unlink(link.c_str());
  } else {
    watch_file(rank, name, link);
  }
  if (changed) changed(rank);
}

void StateDirectory::Impl::on_gone(int rank, const std::string& name) {
  if (ledger.gone(rank, name, regular_file(rank_path(rank) / name))) drop(rank, name);
}

void StateDirectory::Impl::on_modified(int wd) {
  const auto it = files.find(wd);
  if (it == files.end()) return;
  const FileWatch w = it->second;
  for (const auto& [rank, name] : w.names) {
    if (!ledger.modified(rank, name, w.inode)) continue;
    log_line("rank " + std::to_string(rank) + ": state file " + name +
             " was written in place after its commit (no rename): that version is dropped, not restored");
    drop(rank, name);
  }
}

// After an overflow, or at each start without a watch: what the directories hold is taken as
// committed (a rename is the only way a worker that keeps the protocol makes a name), names no
// longer there as gone (after the commits: a refused one puts its name's previous version back).
void StateDirectory::Impl::rescan() {
  for (int rank : ranks) {
    std::vector<std::string> present;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(rank_path(rank), ec)) {
      if (std::string name = entry.path().filename().string(); is_state_name(name)) present.push_back(std::move(name));
    }
    for (const auto& name : present) on_renamed(rank, name);
    for (const auto& [name, entry] : std::map<std::string, CommittedEntry>(ledger.committed(rank))) on_gone(rank, name);
  }
}

// The committed link and the watch on its inode go; on_change is told.
void StateDirectory::Impl::drop(int rank, const std::string& name) {
  unwatch_file(rank, name);
  ::unlink((committed_dir(rank) / name).c_str());
  if (changed) changed(rank);
}

void StateDirectory::Impl::watch_file(int rank, const std::string& name, const fs::path& link) {
  if (!watching) return;
  const int wd = ::inotify_add_watch(watch.native_handle(), link.c_str(), kFileEvents);
  if (wd < 0) {
    log_line("rank " + std::to_string(rank) + ": cannot watch state file " + name + " for writes in place: " +
             std::strerror(errno));
    return;
  }
  auto& w = files[wd];
  if (auto f = regular_file(link)) w.inode = f->inode;
  w.names.emplace_back(rank, name);
  // Written between its rename and this watch: compare with what was committed.
  const auto& now = ledger.committed(rank);
  if (auto e = now.find(name); e != now.end()) {
    if (auto f = regular_file(link); !f || f->size != e->second.facts.size) on_modified(wd);
  }
}

void StateDirectory::Impl::unwatch_file(int rank, const std::string& name) {
  for (auto it = files.begin(); it != files.end(); ++it) {
    auto& names = it->second.names;
    std::erase(names, std::pair<int, std::string>(rank, name));
    if (names.empty()) {
      ::inotify_rm_watch(watch.native_handle(), it->first);
      files.erase(it);
      return;
    }
  }
}

void StateDirectory::install(int rank, std::vector<std::pair<std::string, fs::path>> files, std::uint64_t sequence) {
  for (const auto& [name, path] : files) {
    if (!is_state_name(name)) throw std::invalid_argument("not a state file name: '" + name + "'");
  }
  Impl& s = *impl_;
  s.drain();
  s.make_rank_dir(rank);
  const fs::path dir = s.committed_dir(rank);
  for (const auto& [name, entry] : std::map<std::string, CommittedEntry>(s.ledger.committed(rank))) {
    s.unwatch_file(rank, name);
    ::unlink((dir / name).c_str());
  }
  std::map<std::string, CommittedEntry> set;
  for (const auto& [name, path] : files) {
    const fs::path link = dir / name;
    if (::rename(path.c_str(), link.c_str()) != 0) fail("cannot install state file " + path.string() + " as", link);
    const auto f = regular_file(link);
    if (!f) fail("not a regular file:", link);
    set[name] = CommittedEntry{*f, sequence};
  }
  s.ledger.replace(rank, std::move(set), sequence);
  for (const auto& [name, path] : files) s.watch_file(rank, name, dir / name);
}

void StateDirectory::prepare_for_start(const std::vector<int>& ranks) {
  Impl& s = *impl_;
  s.drain();
  for (int rank : ranks) {
    const fs::path dir = s.make_rank_dir(rank);
    const auto& committed = s.ledger.committed(rank);
    std::error_code ec;
    std::vector<fs::path> extra;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      const auto it = committed.find(name);
      const auto now = regular_file(entry.path());
      if (it == committed.end() || !now || !now->same_file(it->second.facts)) extra.push_back(entry.path());
    }
    for (const auto& path : extra) {
      struct stat st;
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(path.c_str());
      else ::unlink(path.c_str());
    }
    for (const auto& [name, entry] : std::map<std::string, CommittedEntry>(committed)) {
      const fs::path path = dir / name;
      if (regular_file(path)) continue;
      if (::link((s.committed_dir(rank) / name).c_str(), path.c_str()) != 0) {
        log_line("rank " + std::to_string(rank) + ": cannot restore state file " + name + ": " + std::strerror(errno));
      }
    }
  }
}

void StateDirectory::remove() {
  Impl& s = *impl_;
  if (s.removed) return;
  s.removed = true;
  // The watches go first, then the descriptor, closed by a child (close_in_background).
  boost::system::error_code ignored;
  s.watch.cancel(ignored);
  for (const auto& [wd, rank] : s.rank_of_dir) ::inotify_rm_watch(s.watch.native_handle(), wd);
  for (const auto& [wd, file] : s.files) ::inotify_rm_watch(s.watch.native_handle(), wd);
  s.rank_of_dir.clear();
  s.dir_of_rank.clear();
  s.files.clear();
  if (s.watch.is_open()) close_in_background(s.watch.release());
  if (!remove_tree(s.job_root.c_str())) {
    log_line("cannot remove the state directory " + s.job_root.string() + (errno == ELOOP ? " (nested too deep)" : ""));
  }
}

}  // namespace crun
