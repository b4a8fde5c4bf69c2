#include "worker_runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "worker_runtime/hash.h"

namespace crun::rt {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'C', 'R', 'U', 'N', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 8 + 8 + 8;
constexpr std::size_t kChecksumOffset = kHeaderSize - 8;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T take(std::string_view s, std::size_t& pos) {
  if (pos + sizeof(T) > s.size()) throw CheckpointError("checkpoint payload is truncated");
  T v;
  std::memcpy(&v, s.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

std::string errno_text(const std::string& what, const fs::path& p) {
  return what + " " + p.string() + ": " + std::strerror(errno);
}

void write_all(int fd, const char* p, std::size_t n, const fs::path& path, std::size_t total,
               std::size_t& written, const WriteProgress& progress) {
  constexpr std::size_t kChunk = 1u << 20;
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min(n, kChunk));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError(errno_text("write", path));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    written += static_cast<std::size_t>(w);
    if (progress) progress(written, total);
  }
}

void fsync_path(const fs::path& p, int flags) {
  int fd = ::open(p.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(errno_text("open for fsync", p));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    errno = err;
    throw CheckpointError(errno_text("fsync", p));
  }
}

// checkpoint-<step>.crun files in `dir`, highest step first.
std::vector<std::pair<std::uint64_t, fs::path>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<std::uint64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0 || name.size() < 17 || name.substr(name.size() - 5) != ".crun") continue;
    const std::string digits = name.substr(11, name.size() - 16);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.emplace_back(std::stoull(digits), entry.path());
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

std::string encode_checkpoint(const Checkpoint& ckpt) {
  std::string payload;
  put<std::uint32_t>(payload, static_cast<std::uint32_t>(ckpt.sections.size()));
  for (const auto& [name, data] : ckpt.sections) {
    put<std::uint32_t>(payload, static_cast<std::uint32_t>(name.size()));
    payload += name;
    put<std::uint64_t>(payload, data.size());
    payload += data;
  }
  std::string out(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, kCheckpointVersion);
  put<std::uint32_t>(out, 0);
  put<std::uint64_t>(out, ckpt.step);
  put<std::uint64_t>(out, payload.size());
  std::uint64_t sum = fnv1a64(out.data(), out.size());
  sum = fnv1a64(payload.data(), payload.size(), sum);
  put<std::uint64_t>(out, sum);
  out += payload;
  return out;
}

Checkpoint decode_checkpoint(std::string_view bytes) {
  if (bytes.size() < kHeaderSize) throw CheckpointError("file shorter than the header (torn write)");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) throw CheckpointError("not a crun checkpoint (bad magic)");
  std::size_t pos = 8;
  const auto version = take<std::uint32_t>(bytes, pos);
  if (version != kCheckpointVersion) {
    throw CheckpointError("unsupported checkpoint version " + std::to_string(version) + " (this build reads " +
                          std::to_string(kCheckpointVersion) + ")");
  }
  take<std::uint32_t>(bytes, pos);
  Checkpoint ckpt;
  ckpt.step = take<std::uint64_t>(bytes, pos);
  const auto payload_size = take<std::uint64_t>(bytes, pos);
  const auto stored_sum = take<std::uint64_t>(bytes, pos);
  if (bytes.size() - kHeaderSize != payload_size) {
    throw CheckpointError("size mismatch: header says " + std::to_string(payload_size) + " payload bytes, file has " +
                          std::to_string(bytes.size() - kHeaderSize) + " (torn write)");
  }
  std::uint64_t sum = fnv1a64(bytes.data(), kChecksumOffset);
  sum = fnv1a64(bytes.data() + kHeaderSize, payload_size, sum);
  if (sum != stored_sum) throw CheckpointError("checksum mismatch (corrupted file)");
  std::string_view payload = bytes.substr(kHeaderSize);
  pos = 0;
  const auto count = take<std::uint32_t>(payload, pos);
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto name_len = take<std::uint32_t>(payload, pos);
    if (pos + name_len > payload.size()) throw CheckpointError("checkpoint payload is truncated");
    std::string name(payload.substr(pos, name_len));
    pos += name_len;
    const auto size = take<std::uint64_t>(payload, pos);
    if (pos + size > payload.size()) throw CheckpointError("checkpoint payload is truncated");
    ckpt.sections.emplace(std::move(name), std::string(payload.substr(pos, size)));
    pos += size;
  }
  return ckpt;
}

fs::path write_checkpoint_file(const fs::path& dir, const Checkpoint& ckpt, int keep, const WriteProgress& progress,
                               bool durable) {
  fs::create_directories(dir);
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%012llu.crun", static_cast<unsigned long long>(ckpt.step));
  const fs::path final_path = dir / name;
  const fs::path tmp = dir / ("." + std::string(name) + ".tmp");
  const std::string bytes = encode_checkpoint(ckpt);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError(errno_text("create", tmp));
  try {
    std::size_t written = 0;
    write_all(fd, bytes.data(), bytes.size(), tmp, bytes.size(), written, progress);
    if (durable && ::fsync(fd) != 0) throw CheckpointError(errno_text("fsync", tmp));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) throw CheckpointError(errno_text("rename to", final_path));
  if (durable) fsync_path(dir, O_RDONLY | O_DIRECTORY);
  auto all = list_checkpoints(dir);
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);
  }
  return final_path;
}

std::optional<Checkpoint> load_latest_checkpoint_file(const fs::path& dir, std::vector<std::string>* rejected) {
  for (const auto& [step, path] : list_checkpoints(dir)) {
    try {
      std::ifstream in(path, std::ios::binary);
      if (!in) throw CheckpointError("cannot open");
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      Checkpoint c = decode_checkpoint(bytes);
      if (c.step != step) throw CheckpointError("step in file name differs from header");
      return c;
    } catch (const std::exception& e) {
      if (rejected) rejected->push_back(path.string() + ": " + e.what());
    }
  }
  return std::nullopt;
}

std::optional<fs::path> state_checkpoint_dir() {
  const char* dir = std::getenv("CRUN_STATE_DIR");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  return fs::path(dir);
}

namespace {

// Every rank its own copy in its own CRUN_STATE_DIR; all agree whether every write succeeded.
void save_per_rank(ProcessGroup& pg, const Checkpoint& ckpt, int keep) {
  std::int32_t status = 0;
  std::string error;
  try {
    const auto own = state_checkpoint_dir();
    if (!own) throw CheckpointError("no checkpoint directory given and CRUN_STATE_DIR is not set");
    write_checkpoint_file(*own, ckpt, keep, {}, /*durable=*/false);
  } catch (const std::exception& e) {
    status = 1;
    error = e.what();
  }
  std::int32_t any = status;
  pg.all_reduce(&any, 1, DType::kInt32, ReduceOp::kMax)->wait();
  if (any != 0) {
    throw CheckpointError(status != 0 ? "checkpoint write failed: " + error
                                      : std::string("checkpoint write failed on another rank"));
  }
}

// Each rank's newest intact checkpoint; the group's highest step, sent by the lowest rank that
// holds it to those that do not, only when some rank lacks it.
std::optional<Checkpoint> load_per_rank(ProcessGroup& pg) {
  std::optional<Checkpoint> mine;
  if (const auto own = state_checkpoint_dir()) {
    std::vector<std::string> rejected;
    mine = load_latest_checkpoint_file(*own, &rejected);
    for (const auto& r : rejected) std::fprintf(stderr, "crun runtime: skipping checkpoint %s\n", r.c_str());
  }
  const std::int64_t step = mine ? static_cast<std::int64_t>(mine->step) : -1;
  std::int64_t newest = step;
  pg.all_reduce(&newest, 1, DType::kInt64, ReduceOp::kMax)->wait();
  if (newest < 0) return std::nullopt;
  const bool holds = step == newest;
  // [0]: minus the lowest holder's rank; [1]: 1 when some rank lacks the newest step.
  std::int64_t who[2] = {holds ? -pg.rank() : -pg.size(), holds ? 0 : 1};
  pg.all_reduce(who, 2, DType::kInt64, ReduceOp::kMax)->wait();
  if (who[1] == 0) return mine;
  const int holder = static_cast<int>(-who[0]);
  std::string bytes;
  std::int64_t size = 0;
  if (pg.rank() == holder) {
    bytes = encode_checkpoint(*mine);
    size = static_cast<std::int64_t>(bytes.size());
  }
  pg.broadcast(&size, 1, DType::kInt64, holder)->wait();
  bytes.resize(static_cast<std::size_t>(size));
  pg.broadcast(bytes.data(), bytes.size(), DType::kUInt8, holder)->wait();
  if (holds) return mine;
  return decode_checkpoint(bytes);
}

}  // namespace

void save_checkpoint(ProcessGroup& pg, const fs::path& dir, const Checkpoint& ckpt, int keep) {
  if (dir.empty()) {
    save_per_rank(pg, ckpt, keep);
    return;
  }
  std::int32_t status = 0;
  std::string error;
  if (pg.rank() == 0) {
    try {
      write_checkpoint_file(dir, ckpt, keep);
    } catch (const std::exception& e) {
      status = 1;
      error = e.what();
    }
  }
  // Doubles as the barrier: nobody returns before rank 0's rename and directory fsync.
  pg.broadcast(&status, 1, DType::kInt32, 0)->wait();
  if (status != 0) {
    throw CheckpointError(pg.rank() == 0 ? "checkpoint write failed: " + error
                                         : std::string("checkpoint write failed on rank 0"));
  }
}

std::optional<Checkpoint> load_checkpoint(ProcessGroup& pg, const fs::path& dir) {
  if (dir.empty()) return load_per_rank(pg);
  std::string bytes;
  std::int64_t size = -1;
  if (pg.rank() == 0) {
    std::vector<std::string> rejected;
    auto c = load_latest_checkpoint_file(dir, &rejected);
    for (const auto& r : rejected) std::fprintf(stderr, "crun runtime: skipping checkpoint %s\n", r.c_str());
    if (c) {
      bytes = encode_checkpoint(*c);
      size = static_cast<std::int64_t>(bytes.size());
    }
  }
  pg.broadcast(&size, 1, DType::kInt64, 0)->wait();
  if (size < 0) return std::nullopt;
  bytes.resize(static_cast<std::size_t>(size));
  pg.broadcast(bytes.data(), bytes.size(), DType::kUInt8, 0)->wait();
  return decode_checkpoint(bytes);
}

}  // namespace crun::rt
