// Checkpoints: named byte sections plus a step, written atomically, versioned and checksummed.
//
// Contract
//   - File format v1 (little endian): "CRUNCKPT" | u32 version | u32 reserved | u64 step |
//     u64 payload_size | u64 fnv1a64(header fields before it + payload) | payload, where payload =
//     u32 count, then per section u32 name_len, name, u64 size, bytes (sections sorted by name).
//     decode rejects a wrong magic, an unknown version, a size mismatch (torn file) or a checksum
//     mismatch with CheckpointError naming the reason.
//   - write_checkpoint_file(): writes "<dir>/.checkpoint-<step>.crun.tmp", fsyncs it, renames it
//     to "<dir>/checkpoint-<step:012>.crun", fsyncs the directory, then deletes all but the
//     newest `keep` checkpoints. A crash at any point leaves every earlier checkpoint intact; a
//     leftover temp file is never considered by the loader. With durable = false, no fsync (a
//     tmpfs such as CRUN_STATE_DIR, where the rename alone is the commit the agent sees).
//   - load_latest_checkpoint_file(): tries checkpoint files from the highest step down and
//     returns the first that decodes; rejected files are listed in `rejected` (path: reason).
//     nullopt when none is usable.
//   - save_checkpoint()/load_checkpoint() are the group versions: rank 0 writes (others wait in
//     the same collectives, and all ranks throw if rank 0's write failed); rank 0 loads and
//     broadcasts the bytes, so other ranks need not see the directory. They move host memory:
//     pass a Gloo group (Runtime::cpu_pg()).
//   - With an empty `dir` they use each rank's own state directory, CRUN_STATE_DIR
//     (state_checkpoint_dir(); the agent keeps it across restarts, agent/state_directory.h):
//     every rank writes its own copy there (durable = false) and all throw if any rank's write
//     failed (or it has no CRUN_STATE_DIR). At load every rank reads its own newest intact
//     checkpoint; the group takes the highest step any rank holds, and when some rank lacks that
//     one, the lowest rank holding it broadcasts it: a rank whose state was lost still resumes.
//
// Threading
//   Free functions; the group versions follow the ProcessGroup's threading rule.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "worker_runtime/process_group.h"
#include "worker_runtime/types.h"

namespace crun::rt {

class CheckpointError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

struct Checkpoint {
  std::uint64_t step = 0;
  std::map<std::string, std::string> sections;
};

inline constexpr std::uint32_t kCheckpointVersion = 1;

std::string encode_checkpoint(const Checkpoint& ckpt);
Checkpoint decode_checkpoint(std::string_view bytes);

// Called after each chunk is written to the temp file (bytes written so far, total bytes).
using WriteProgress = std::function<void(std::size_t written, std::size_t total)>;

std::filesystem::path write_checkpoint_file(const std::filesystem::path& dir, const Checkpoint& ckpt,
                                            int keep = 2, const WriteProgress& progress = {}, bool durable = true);
std::optional<Checkpoint> load_latest_checkpoint_file(const std::filesystem::path& dir,
                                                      std::vector<std::string>* rejected = nullptr);

// CRUN_STATE_DIR, when crun set it (nullopt: unset or empty).
std::optional<std::filesystem::path> state_checkpoint_dir();

void save_checkpoint(ProcessGroup& pg, const std::filesystem::path& dir, const Checkpoint& ckpt, int keep = 2);
std::optional<Checkpoint> load_checkpoint(ProcessGroup& pg, const std::filesystem::path& dir);

// Helpers to put plain arrays into sections.
template <typename T>
std::string to_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> from_bytes(std::string_view s) {
  if (s.size() % sizeof(T) != 0) throw CheckpointError("checkpoint section size is not a multiple of the element size");
  std::vector<T> v(s.size() / sizeof(T));
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

}  // namespace crun::rt
