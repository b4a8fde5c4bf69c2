#include "agent/replica_protocol.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace crun::replica {

namespace {

void put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get(const std::string& in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

constexpr std::size_t kHelloFixed = 1 + 4 + 2;
constexpr std::size_t kSetSize = 1 + 4 + 8 + 4 + 8;
constexpr std::size_t kFileFixed = 1 + 2;
constexpr std::size_t kRankOnly = 1 + 4;
constexpr std::size_t kRankSequence = 1 + 4 + 8;

std::string rank_message(char kind, int rank) {
  std::string out(1, kind);
  put(out, static_cast<std::uint32_t>(rank), 4);
  return out;
}

std::string rank_sequence_message(char kind, int rank, std::uint64_t sequence) {
  std::string out = rank_message(kind, rank);
  put(out, sequence, 8);
  return out;
}

}  // namespace

std::string encode_hello(std::string_view token) {
  std::string out(1, 'H');
  out.append(kMagic, 4);
  put(out, token.size(), 2);
  out.append(token);
  return out;
}

std::string encode_set(int rank, std::uint64_t sequence, std::uint32_t files, std::uint64_t total_bytes) {
  std::string out = rank_sequence_message('S', rank, sequence);
  put(out, files, 4);
  put(out, total_bytes, 8);
  return out;
}

std::string encode_file(std::string_view name, std::uint64_t size) {
  std::string out(1, 'F');
  put(out, name.size(), 2);
  out.append(name);
  put(out, size, 8);
  return out;
}

std::string encode_query(int rank) { return rank_message('Q', rank); }
std::string encode_have(int rank, std::uint64_t sequence) { return rank_sequence_message('V', rank, sequence); }
std::string encode_get(int rank) { return rank_message('G', rank); }
std::string encode_ack(int rank, std::uint64_t sequence) { return rank_sequence_message('A', rank, sequence); }

bool valid_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameBytes && name.front() != '.' &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

ReplicaDecoder::ReplicaDecoder(Side side, ReplicaEvents events, std::uint64_t max_set_bytes)
    : side_(side), ev_(std::move(events)), max_set_bytes_(max_set_bytes) {}

bool ReplicaDecoder::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  return false;
}

std::size_t ReplicaDecoder::header_size() const {
  switch (header_[0]) {
    case 'H': return header_.size() < kHelloFixed ? 0 : kHelloFixed + get(header_, 5, 2);
    case 'S': return kSetSize;
    case 'F': return header_.size() < kFileFixed ? 0 : kFileFixed + get(header_, 1, 2) + 8;
    case 'Q': case 'G': return kRankOnly;
    case 'V': case 'A': return kRankSequence;
    default: return 0;
  }
}

bool ReplicaDecoder::feed(const char* data, std::size_t size) {
  if (!error_.empty()) return false;
  while (size > 0 && !stopped_) {
    if (in_file_) {  // a file's bytes go straight through
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(file_left_, size));
      if (n > 0 && ev_.file_data) ev_.file_data(data, n);
      data += n;
      size -= n;
      file_left_ -= n;
      if (file_left_ == 0) {
        in_file_ = false;
        if (ev_.file_end) ev_.file_end();
        if (files_left_ == 0 && ev_.set_end) ev_.set_end();
      }
      continue;
    }
    if (header_.empty()) {
      const char kind = *data;
      const char* kinds = side_ == Side::kServer ? "HSFQG" : "SFVA";
      if (kind == '\0' || std::strchr(kinds, kind) == nullptr) {
        return fail("unexpected message kind " + std::to_string(static_cast<unsigned char>(kind)));
      }
      if (side_ == Side::kServer && !hello_seen_ && kind != 'H') return fail("the first message is not a hello");
      if (hello_seen_ && kind == 'H') return fail("a second hello");
      if (files_left_ > 0 && kind != 'F') return fail("a set's file expected");
      if (files_left_ == 0 && kind == 'F') return fail("a file outside a set");
    }
    // Collect the header: its fixed part first, then (hello, file) its variable part.
    std::size_t want = header_.empty() ? 1 : header_size();
    if (want == 0) want = header_[0] == 'H' ? kHelloFixed : kFileFixed;
    const std::size_t n = std::min(want - header_.size(), size);
    header_.append(data, n);
    data += n;
    size -= n;
    if (header_.size() < want) continue;
    const std::size_t full = header_size();
    if (full == 0) continue;
    if (header_[0] == 'H' && full - kHelloFixed > kMaxTokenBytes) return fail("a token longer than 4096 bytes");
    if (header_[0] == 'F' && full - kFileFixed - 8 > kMaxNameBytes) return fail("a file name longer than 255 bytes");
    if (header_.size() < full) continue;
    if (!dispatch()) return false;
    header_.clear();
  }
  return true;
}

bool ReplicaDecoder::dispatch() {
  const std::string& h = header_;
  switch (h[0]) {
    case 'H': {
      if (h.compare(1, 4, kMagic, 4) != 0) return fail("not a crun replica connection (bad magic)");
      hello_seen_ = true;
      if (ev_.hello) ev_.hello(std::string_view(h).substr(kHelloFixed));
      return true;
    }
    case 'S': {
      const auto rank = get(h, 1, 4);
      const auto sequence = get(h, 5, 8);
      const auto files = static_cast<std::uint32_t>(get(h, 13, 4));
      const auto total = get(h, 17, 8);
      if (rank > 0x7fffffff) return fail("a rank out of range");
      if (files > kMaxFiles) return fail("a set of more than " + std::to_string(kMaxFiles) + " files");
      if (total > max_set_bytes_) {
        return fail("a set of " + std::to_string(total) + " bytes, over the bound of " + std::to_string(max_set_bytes_));
      }
      files_left_ = files;
      set_bytes_left_ = total;
      if (ev_.set_begin) ev_.set_begin(static_cast<int>(rank), sequence, files, total);
      if (files == 0) {
        if (total != 0) return fail("an empty set declares bytes");
        if (ev_.set_end) ev_.set_end();
      }
      return true;
    }
    case 'F': {
      const std::size_t name_len = get(h, 1, 2);
      const std::string_view name = std::string_view(h).substr(kFileFixed, name_len);
      const std::uint64_t size = get(h, kFileFixed + name_len, 8);
      if (!valid_name(name)) return fail("a file name that is not a plain name");
      if (size > set_bytes_left_) return fail("a set's files larger than its declared total");
      set_bytes_left_ -= size;
      --files_left_;
      if (files_left_ == 0 && set_bytes_left_ != 0) return fail("a set's files smaller than its declared total");
      in_file_ = true;
      file_left_ = size;
      if (ev_.file_begin) ev_.file_begin(name, size);
      if (size == 0) {
        in_file_ = false;
        if (ev_.file_end) ev_.file_end();
        if (files_left_ == 0 && ev_.set_end) ev_.set_end();
      }
      return true;
    }
    case 'Q': case 'G': {
      const auto rank = get(h, 1, 4);
      if (rank > 0x7fffffff) return fail("a rank out of range");
      if (h[0] == 'Q' && ev_.query) ev_.query(static_cast<int>(rank));
      if (h[0] == 'G' && ev_.get) ev_.get(static_cast<int>(rank));
      return true;
    }
    case 'V': case 'A': {
      const auto rank = get(h, 1, 4);
      if (rank > 0x7fffffff) return fail("a rank out of range");
      const auto sequence = get(h, 5, 8);
      if (h[0] == 'V' && ev_.have) ev_.have(static_cast<int>(rank), sequence);
      if (h[0] == 'A' && ev_.ack) ev_.ack(static_cast<int>(rank), sequence);
      return true;
    }
  }
  return fail("unknown message kind");
}

}  // namespace crun::replica
