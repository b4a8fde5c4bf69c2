// Wire format of crun's store (docs/store-protocol.md is the normative text; this is its code).
//
// Contract
//   - Preamble, client → server: magic u32 | version u16 | token_len u16 | token bytes.
//     Reply, server → client:    magic u32 | version u16 | HelloStatus u16. Non-OK closes.
//   - Then frames both ways: body_len u32 | body. Request body: Op u8 | request_id u32 | payload.
//     Reply body: Status u8 | request_id u32 | payload. Notifications: Status::kNotify with the
//     watch's request id. Integers are little-endian; strings are u32 length + bytes.
//   - Reader::* throws ProtocolError on truncated or oversized input; it never reads past the body.
//
// Threading
//   Pure functions and value types; safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace crun::wire {

inline constexpr std::uint32_t kMagic = 0x54535243;  // "CRST" in little-endian bytes
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kPreambleSize = 8;      // magic, version, token_len
inline constexpr std::size_t kMaxTokenLength = 1024;
inline constexpr std::size_t kFrameHeaderSize = 4;   // body_len
inline constexpr std::size_t kBodyHeaderSize = 5;    // op/status + request_id
inline constexpr std::uint32_t kForever = 0xFFFFFFFFu;  // timeout_ms meaning "no deadline"

enum class HelloStatus : std::uint16_t { kOk = 0, kBadVersion = 1, kBadToken = 2, kServerFull = 3 };

enum class Op : std::uint8_t {
  kSet = 1,
  kGet = 2,         // key, timeout_ms u32                  → value
  kAdd = 3,         // key, delta i64                       → i64
  kCompareSet = 4,  // key, expected, desired               → value
  kCheck = 5,       // n u32, keys                          → u8
  kWait = 6,        // timeout_ms u32, n u32, keys          → (empty)
  kDelete = 7,      // key                                  → u8 existed
  kNumKeys = 8,     // prefix                               → i64
  kMultiGet = 9,    // timeout_ms u32, n u32, keys          → n u32, values
  kMultiSet = 10,   // n u32, (key, value)*                 → (empty)
  kAppend = 11,     // key, value                           → i64 new length
  kListKeys = 12,   // prefix, limit u32                    → n u32, keys
  kTryGet = 13,     // key                                  → u8 found, value
  kWatch = 14,      // prefix                               → (empty); then notifications
  kUnwatch = 15,    // watch request id u32                 → (empty)
  kPing = 16,       // (empty)                              → (empty)
  kSetEphemeral = 17,  // key, value: deleted when this connection closes → (empty)
};

enum class Status : std::uint8_t {
  kOk = 0,
  kTimeout = 1,
  kBadRequest = 2,
  kKeyTooLong = 3,
  kValueTooLarge = 4,
  kNotInteger = 5,
  kTooManyPending = 6,
  kUnknownOp = 7,
  kTooManyKeys = 8,
  kNotify = 255,  // payload: kind u8 (1 set, 2 delete), key, value
};

const char* op_name(Op op);
const char* status_name(Status status);
const char* hello_status_name(HelloStatus status);

class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends little-endian fields to a string buffer.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  std::size_t size() const { return out_.size(); }  // bytes in the buffer written to
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { raw(&v, 2); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  // Starts a frame; finish_frame() patches its length.
  std::size_t begin_frame(std::uint8_t code, std::uint32_t request_id) {
    std::size_t at = out_.size();
    u32(0);
    u8(code);
    u32(request_id);
    return at;
  }
  void finish_frame(std::size_t at) {
    auto len = static_cast<std::uint32_t>(out_.size() - at - kFrameHeaderSize);
    std::memcpy(out_.data() + at, &len, 4);
  }

 private:
  void raw(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }  // host is LE
  std::string& out_;
};

// Reads fields from one frame body; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(std::string_view body) : p_(body) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint16_t u16() { return load<std::uint16_t>(); }
  std::uint32_t u32() { return load<std::uint32_t>(); }
  std::int64_t i64() { return load<std::int64_t>(); }
  std::string_view str() { return take(u32()); }
  // A count of items each at least `min_item_bytes` long: rejects counts the body cannot hold.
  std::uint32_t count(std::size_t min_item_bytes) {
    std::uint32_t n = u32();
    if (min_item_bytes != 0 && n > p_.size() / min_item_bytes) throw ProtocolError("item count exceeds frame");
    return n;
  }
  bool done() const { return p_.empty(); }
  void expect_done() const {
    if (!p_.empty()) throw ProtocolError("trailing bytes in frame");
  }

 private:
  std::string_view take(std::size_t n) {
    if (n > p_.size()) throw ProtocolError("truncated frame");
    auto out = p_.substr(0, n);
    p_.remove_prefix(n);
    return out;
  }
  template <typename T>
  T load() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view p_;
};

// Encodes the client preamble.
std::string encode_hello(std::string_view token);
// Decodes a 4-byte frame header; throws ProtocolError when the length exceeds `max_body`.
std::uint32_t decode_frame_length(const char* header, std::size_t max_body);

}  // namespace crun::wire
