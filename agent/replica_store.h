// ReplicaStore: the sets other nodes replicated to this one, kept under
// StateDirectory::job_root()/replicas/ (agent/state_directory.h): per origin rank, only the newest
// complete set.
//
// Contract
//   - A complete set lives in replicas/rank-<rank>.<sequence>/ (its files, plain names). keep()
//     takes a set received in a temporary directory (agent/replica_link.h) and renames it there
//     when its sequence is newer than the one held (else it is left for the caller to remove),
//     then removes the older one. A set is renamed into place only once its last byte is in, so
//     a half-received set is never listed.
//   - newest(rank): the rank's set held now (its sequence and files), or nothing.
//   - snapshot(rank): the newest set, its files opened (agent/replica_link.h OutgoingSet), to send.
//
// Threading
//   The agent's loop only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/replica_link.h"

namespace crun {

struct HeldSet {
  std::uint64_t sequence = 0;
  std::filesystem::path dir;
  std::vector<std::pair<std::string, std::uint64_t>> files;  // name, size
  std::uint64_t bytes = 0;
};

class ReplicaStore {
 public:
  explicit ReplicaStore(std::filesystem::path root);  // made on demand
  const std::filesystem::path& root() const { return root_; }

  // True when `set` became the rank's newest (its directory moved away from set.dir).
  bool keep(ReceivedSet& set);
  std::optional<HeldSet> newest(int rank) const;
  std::optional<OutgoingSet> snapshot(int rank) const;

 private:
  std::filesystem::path root_;
  std::map<int, HeldSet> held_;
};

// Opens each of `files` (name, path) read-only and its size now: a set to send. Nothing when
// one cannot be opened (it was deleted meanwhile: the next change sends the newer set).
std::optional<OutgoingSet> open_set(int rank, std::uint64_t sequence,
                                    const std::vector<std::pair<std::string, std::filesystem::path>>& files);

}  // namespace crun
