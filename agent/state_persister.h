// StatePersister: --state-persist-dir DIR. Committed state (agent/state_directory.h) also copied
// to DIR in the background, so that it outlives the whole job's nodes.
//
// Contract
//   - changed(set): a rank's newest committed set, its files already opened on the loop (so a
//     later commit does not change what is copied). A thread of its own copies it to
//     DIR/rank-<rank>/ (copy_file_range, 4 MiB at a time: bounded memory, no buffer of its own)
//     by way of DIR/.rank-<rank>.<random>/, swapped in by one rename (RENAME_EXCHANGE) when
//     complete, so DIR/rank-<rank>/ always holds one whole set; DIR/rank-<rank>/.sequence holds
//     its sequence. A set of the sequence already persisted is not copied again. Sets of a rank coalesce while a copy runs: only the newest waits.
//   - The workers never wait for it: changed() only hands the descriptors over. An I/O error is
//     one line (the first of a run of errors) and the set is dropped; the next change tries again.
//   - The destructor copies what waits, then stops the thread: the job's last committed state is
//     in DIR at its end.
//
// Threading
//   changed() and the destructor on the agent's loop; the copies on the persister's thread.
#pragma once

#include <filesystem>
#include <memory>

#include "agent/replica_link.h"

namespace crun {

class StatePersister {
 public:
  explicit StatePersister(std::filesystem::path dir);  // throws std::system_error when DIR cannot be made
  ~StatePersister();
  StatePersister(const StatePersister&) = delete;
  StatePersister& operator=(const StatePersister&) = delete;

  void changed(OutgoingSet set);
  // Blocks until nothing waits or is being copied (tests, the job's end).
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
