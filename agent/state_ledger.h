// StateLedger: what each rank's CRUN_STATE_DIR has committed, and the commit rules, with no file
// system (agent/state_directory.h does the files and the watch).
//
// Contract
//   - is_state_name(name): a name that can be committed: not empty, no '/', not starting with
//     '.' (a dot-name is a save being written: never committed, restored or replicated).
//   - commit(rank, name, facts, max_bytes): a rename onto `name` was seen and the file there now
//     is `facts`. kSame: that very file (same device and inode) is committed already,
//     nothing changes. kRefuse: the rank's committed bytes (the sum of its committed files'
//     sizes, `name`'s previous version replaced by this one) would exceed max_bytes; nothing
//     changes, `needed` says how many. kAccepted: recorded, the rank's sequence + 1.
//   - gone(rank, name, now): the name was deleted or moved away; `now` is what the name holds at
//     this moment (nullopt: nothing). Dropped (true, sequence + 1) unless the name still holds
//     the committed file (the agent put it back itself).
//   - modified(rank, name, inode): the file `inode` was written to (a write or a truncation seen
//     on it). When it is `name`'s committed file, that version's bytes were changed in place
//     after its commit (no rename): it is dropped (true, sequence + 1), as a torn save.
//   - replace(rank, files, sequence): the rank's set becomes `files` (install from a replica).
//   - committed(rank): name -> entry, sorted by name; bytes(rank); sequence(rank) (0 for a rank
//     never seen).
//
// Threading
//   A plain value; the owner's thread (the agent's loop).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace crun {

bool is_state_name(std::string_view name);

struct StateFileFacts {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  bool same_file(const StateFileFacts& o) const { return device == o.device && inode == o.inode; }
};

struct CommittedEntry {
  StateFileFacts facts;
  std::uint64_t sequence = 0;  // the rank's sequence when this version was committed
};

class StateLedger {
 public:
  enum class Verdict { kSame, kAccepted, kRefuse };
  struct Commit {
    Verdict verdict = Verdict::kSame;
    std::uint64_t needed = 0;  // the rank's committed bytes with this file in
  };

  Commit commit(int rank, const std::string& name, const StateFileFacts& facts, std::uint64_t max_bytes);
  bool gone(int rank, const std::string& name, const std::optional<StateFileFacts>& now);
  bool modified(int rank, const std::string& name, std::uint64_t inode);
  void replace(int rank, std::map<std::string, CommittedEntry> files, std::uint64_t sequence);

  const std::map<std::string, CommittedEntry>& committed(int rank) const;
  std::uint64_t bytes(int rank) const;
  std::uint64_t sequence(int rank) const;

 private:
  struct Rank {
    std::map<std::string, CommittedEntry> files;
    std::uint64_t bytes = 0;
    std::uint64_t sequence = 0;
  };
  std::map<int, Rank> ranks_;
};

}  // namespace crun
