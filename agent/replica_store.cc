#include "agent/replica_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <system_error>

#include "base/log.h"

namespace crun {

namespace fs = std::filesystem;

ReplicaStore::ReplicaStore(fs::path root) : root_(std::move(root)) {}

bool ReplicaStore::keep(ReceivedSet& set) {
  auto it = held_.find(set.rank);
  if (it != held_.end() && it->second.sequence >= set.sequence) return false;
  const fs::path dir = root_ / ("rank-" + std::to_string(set.rank) + "." + std::to_string(set.sequence));
  std::error_code ec;
  fs::rename(set.dir, dir, ec);
  if (ec) {
    log_line("cannot keep the replica of rank " + std::to_string(set.rank) + " in " + dir.string() + ": " + ec.message());
    return false;
  }
  HeldSet h{set.sequence, dir, set.files, set.bytes};
  if (it != held_.end()) {
    fs::remove_all(it->second.dir, ec);
    it->second = std::move(h);
  } else {
    held_.emplace(set.rank, std::move(h));
  }
  set.dir.clear();
  return true;
}

std::optional<HeldSet> ReplicaStore::newest(int rank) const {
  auto it = held_.find(rank);
  if (it == held_.end()) return std::nullopt;
  return it->second;
}

std::optional<OutgoingSet> ReplicaStore::snapshot(int rank) const {
  auto it = held_.find(rank);
  if (it == held_.end()) return std::nullopt;
  std::vector<std::pair<std::string, fs::path>> files;
  for (const auto& [name, size] : it->second.files) files.emplace_back(name, it->second.dir / name);
  return open_set(rank, it->second.sequence, files);
}

std::optional<OutgoingSet> open_set(int rank, std::uint64_t sequence, const std::vector<std::pair<std::string, fs::path>>& files) {
  OutgoingSet set;
  set.rank = rank;
  set.sequence = sequence;
  for (const auto& [name, path] : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct stat st {};
    ::fstat(fd, &st);
    set.files.push_back(OutgoingFile{name, fd, static_cast<std::uint64_t>(st.st_size)});
  }
  return set;
}

}  // namespace crun
