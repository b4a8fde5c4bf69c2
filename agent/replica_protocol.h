// The state replicas' wire format: what one agent sends another over its replication connection
// (agent/replica_server.h, agent/replica_client.h; docs/decisions.md, "State that outlives a node").
//
// Contract
//   A connection is a stream of messages; integers are little-endian, fixed width.
//     hello   'H' "CRS1" u16 token_len, token            first on every connection, client to server
//     set     'S' u32 rank, u64 sequence, u32 files, u64 total_bytes, then `files` times:
//     file    'F' u16 name_len, name, u64 size, then `size` raw bytes
//     query   'Q' u32 rank                  client asks: the newest sequence you hold for `rank`
//     have    'V' u32 rank, u64 sequence    server's answer (sequence 0: none)
//     get     'G' u32 rank                  client asks for the newest set of `rank`: a set, or have 0
//     ack     'A' u32 rank, u64 sequence    server: the set is stored (or an older one was dropped)
//   A set's file names are plain names (no '/', not "." or "..", never starting with '.', at most
//   kMaxNameBytes), its file count at most kMaxFiles, its sizes add up to total_bytes, and
//   total_bytes is at most the decoder's max_set_bytes (--state-max-bytes). Anything else is a
//   protocol error: the decoder says why in one line and takes no more input.
//   ReplicaDecoder holds at most one message header (< 300 bytes): a file's bytes are handed on
//   as spans of the caller's input, never collected.
//
// Threading
//   Value types and a decoder owned by one connection; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace crun::replica {

constexpr std::size_t kMaxNameBytes = 255;
constexpr std::uint32_t kMaxFiles = 4096;
constexpr std::size_t kMaxTokenBytes = 4096;
constexpr char kMagic[] = "CRS1";

// Encoders: the message's bytes (a file's header only; its bytes follow it).
std::string encode_hello(std::string_view token);
std::string encode_set(int rank, std::uint64_t sequence, std::uint32_t files, std::uint64_t total_bytes);
std::string encode_file(std::string_view name, std::uint64_t size);
std::string encode_query(int rank);
std::string encode_have(int rank, std::uint64_t sequence);
std::string encode_get(int rank);
std::string encode_ack(int rank, std::uint64_t sequence);

// A file name a set may carry (the rules above).
bool valid_name(std::string_view name);

// What a decoder hands on, message by message, in order. Unset callbacks ignore their message.
struct ReplicaEvents {
  std::function<void(std::string_view token)> hello;
  std::function<void(int rank, std::uint64_t sequence, std::uint32_t files, std::uint64_t total_bytes)> set_begin;
  std::function<void(std::string_view name, std::uint64_t size)> file_begin;
  std::function<void(const char* data, std::size_t size)> file_data;  // a file's bytes, in pieces
  std::function<void()> file_end;
  std::function<void()> set_end;  // after the set's last file (at once for a set of none)
  std::function<void(int rank)> query;
  std::function<void(int rank, std::uint64_t sequence)> have;
  std::function<void(int rank)> get;
  std::function<void(int rank, std::uint64_t sequence)> ack;
};

class ReplicaDecoder {
 public:
  // kServer reads what a client sends (hello first, then set, query, get); kClient what a server
  // answers (set, have, ack).
  enum class Side { kServer, kClient };
  ReplicaDecoder(Side side, ReplicaEvents events, std::uint64_t max_set_bytes);

  // Consumes `size` bytes; false once the input is malformed (error() says why; later input is
  // refused). A callback may call stop(): the rest of the input is then left unread.
  bool feed(const char* data, std::size_t size);
  void stop() { stopped_ = true; }
  const std::string& error() const { return error_; }
  bool in_set() const { return files_left_ > 0 || in_file_; }

 private:
  bool fail(std::string why);
  // Bytes the header at hand needs in all, once its first bytes are in (0: not yet known).
  std::size_t header_size() const;
  bool dispatch();

  Side side_;
  ReplicaEvents ev_;
  std::uint64_t max_set_bytes_;
  std::string header_;               // the message header being collected
  bool hello_seen_ = false;
  std::uint32_t files_left_ = 0;     // files still to come in the current set
  std::uint64_t set_bytes_left_ = 0;  // of its declared total
  bool in_file_ = false;
  std::uint64_t file_left_ = 0;
  bool stopped_ = false;
  std::string error_;
};

}  // namespace crun::replica
