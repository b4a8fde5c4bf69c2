#include "agent/state_persister.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/fd_io.h"
#include "base/log.h"
#include "base/quiet_thread.h"
#include "base/random_bits.h"

namespace crun {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kCopyChunk = 4 << 20;

// Copies `size` bytes of `from` into a new file at `to`; false with errno set.
bool copy_file(int from, std::uint64_t size, const fs::path& to) {
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) return false;
  loff_t in_off = 0;
  std::uint64_t left = size;
  bool ok = true;
  while (left > 0) {
    ssize_t n = ::copy_file_range(from, &in_off, out, nullptr, std::min<std::uint64_t>(left, kCopyChunk), 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) {  // a pread/write round instead
      char buf[64 * 1024];
      n = ::pread(from, buf, std::min<std::uint64_t>(left, sizeof buf), in_off);
      if (n > 0 && !write_all(out, buf, static_cast<std::size_t>(n))) n = -1;
      if (n > 0) in_off += n;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // the file shrank
      ok = false;
      break;
    }
    left -= static_cast<std::uint64_t>(n);
  }
  const int saved = errno;
  if (::close(out) != 0 && ok) return false;
  errno = saved;
  return ok;
}

}  // namespace

struct StatePersister::Impl {
  explicit Impl(fs::path d) : dir(std::move(d)) {
    fs::create_directories(dir);
    worker = quiet_thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    wake.notify_all();
    worker.join();
  }

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      wake.wait(lock, [this] { return stopping || !waiting.empty(); });
      if (waiting.empty()) return;  // stopping, and nothing left
      auto next = waiting.begin();
      OutgoingSet set = std::move(next->second);
      waiting.erase(next);
      copying = true;
      lock.unlock();
      const bool ok = persist(set);
      lock.lock();
      if (ok) persisted[set.rank] = set.sequence;
      copying = false;
      idle.notify_all();
    }
  }

  bool persist(const OutgoingSet& set) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random_bits()));
    const fs::path tmp = dir / (".rank-" + std::to_string(set.rank) + "." + suffix);
    const fs::path target = dir / ("rank-" + std::to_string(set.rank));
    std::error_code ec;
    std::string failed;
    if (!fs::create_directory(tmp, ec)) failed = "cannot make " + tmp.string() + ": " + ec.message();
    for (const auto& f : set.files) {
      if (!failed.empty()) break;
      if (!copy_file(f.fd, f.size, tmp / f.name)) failed = "cannot copy " + f.name + " to " + tmp.string() + ": " + std::strerror(errno);
    }
    if (failed.empty()) {
      const std::string seq = std::to_string(set.sequence) + "\n";
      const int fd = ::open((tmp / ".sequence").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 || !write_all(fd, seq.data(), seq.size())) failed = "cannot write " + (tmp / ".sequence").string() + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
    }
    if (failed.empty()) {
      // One rename: the old set and the new change places (or the new one takes a free name).
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
        if (errno != ENOENT || ::rename(tmp.c_str(), target.c_str()) != 0) {
          failed = "cannot put " + target.string() + " in place: " + std::strerror(errno);
        }
      }
    }
    fs::remove_all(tmp, ec);  // the old set (after an exchange), or what a failure left
    if (!failed.empty()) {
      if (!failing) log_line("--state-persist-dir: " + failed + "; this set of rank " + std::to_string(set.rank) + " is not persisted");
      failing = true;
      return false;
    }
    failing = false;
    return true;
  }

  fs::path dir;
  std::mutex mu;
  std::condition_variable wake, idle;
  std::map<int, OutgoingSet> waiting;  // rank -> its newest set not yet copied
  std::map<int, std::uint64_t> persisted;  // rank -> the sequence DIR/rank-<rank> holds
  bool copying = false;
  bool stopping = false;
  bool failing = false;  // the persister's thread only
  std::thread worker;
};

StatePersister::StatePersister(fs::path dir) : impl_(std::make_unique<Impl>(std::move(dir))) {}
StatePersister::~StatePersister() = default;

void StatePersister::changed(OutgoingSet set) {
  const int rank = set.rank;
  {
    std::lock_guard lock(impl_->mu);
    if (auto done = impl_->persisted.find(rank); done != impl_->persisted.end() && done->second == set.sequence) return;
    impl_->waiting[rank] = std::move(set);  // an older one waiting is closed: only the newest is copied
  }
  impl_->wake.notify_one();
}

void StatePersister::drain() {
  std::unique_lock lock(impl_->mu);
  impl_->idle.wait(lock, [this] { return impl_->waiting.empty() && !impl_->copying; });
}

}  // namespace crun
