// TcpStoreDialect: torch's TCPStore wire protocol on one connection of crun's store, as bytes in
// and bytes out (docs/store-protocol.md, "torch's TCPStore clients").
//
// Contract
//   - StoreSession hands a connection over when its first byte is not crun's magic and is a
//     TCPStore query code (is_torch_first_byte). From then on decode() takes the buffered bytes,
//     runs every complete request through crun's operations (store_operations.h: the same
//     functions and limits as crun's protocol) and appends torch's replies to `out`; it
//     returns how many bytes it used (a request cut short stays for the next call). After each
//     request's answer it calls `answered`; false stops decoding there (the session ended).
//     GET and MULTI_GET reference a large value's bytes in `out` (reply_queue.h), not copies.
//   - Two numberings, told apart by the first request: torch >= 2.2 opens with VALIDATE and its
//     magic (00 CE F7 85 3C) and is decoded with 2.2's codes (PING, APPEND, MULTI_GET/SET,
//     CANCEL_WAIT, LIST included); anything else is torch 1.x-2.0 (the 1.13 client: SET=0 ...
//     DELETE_KEY=8). torch 2.1 (no VALIDATE, codes shifted from 7 on) is not told apart.
//   - Keys and values are stored as the client sends them (torch's own "/" root included), so
//     crun's clients see the same keys. Semantics follow torch's server: WAIT answers once every
//     key exists (no server-side timeout: the client gives up, and 2.x cancels with CANCEL_WAIT);
//     GET of a missing key answers an empty value; COMPARE_SET of a missing key with a non-empty
//     expected value answers the expected value and stores nothing.
//     LIST answers at most kMaxKeysPerRequest keys, as one list_keys does.
//   - torch's protocol has no error reply: what crun's protocol refuses with an error status
//     (a key over kMaxKeyLength, a value over kMaxValueSize, ADD on a value that is not a decimal
//     integer, an APPEND past kMaxValueSize) throws wire::ProtocolError with the operation's own
//     message, and the session closes the connection. So do an unknown or unsupported query code
//     (1.x's WATCH_KEY, 2.x's queues), more than kMaxKeysPerRequest keys, a request longer than
//     kMaxFrameSize (crun's bound on one frame, checked on each declared length before its bytes
//     arrive: memory follows bytes received), more than `max_parked` waits parked, a bad magic.
//   - A wait completed by another connection's write appends its answer to `out` and calls
//     `queued_from_outside`; one completed by this connection's own request is answered after
//     that request's reply. detach() (and the destructor) unparks every wait.
//
// Threading
//   The server's event-loop thread only, like its KeySpace.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "store/store_protocol.h"

namespace crun {

class KeySpace;
class ReplyQueue;

class TcpStoreDialect {
 public:
  // True when `byte`, the first byte of a connection, is one a TCPStore client can send first.
  static bool is_torch_first_byte(unsigned char byte);

  TcpStoreDialect(KeySpace& keys, std::size_t max_parked, ReplyQueue& out, std::function<void()> queued_from_outside,
                  std::function<bool()> answered);
  ~TcpStoreDialect();
  TcpStoreDialect(const TcpStoreDialect&) = delete;
  TcpStoreDialect& operator=(const TcpStoreDialect&) = delete;

  std::size_t decode(std::string_view in);
  std::size_t parked() const { return parked_.size(); }
  void detach();

  // "torch 1.x" until a VALIDATE was seen, then "torch 2.x".
  const char* version_name() const;

 private:
  struct Parked;
  enum class Numbering { kUnknown, kTorch1, kTorch2 };
  enum class Query;
  class Cursor;

  void handle(Query q, Cursor& c);
  void wait(Cursor& c);
  void cancel_waits();
  void ready(Parked& p);
  void put_value(std::string_view key);
  wire::Writer payload();
  wire::Reader applied(const char* op, wire::Status status);
  Query query_of(unsigned char code) const;

  KeySpace& keys_;
  std::size_t max_parked_;
  ReplyQueue& out_;
  std::function<void()> queued_from_outside_;
  std::function<bool()> answered_;
  Numbering numbering_ = Numbering::kUnknown;
  bool in_request_ = false;
  std::string late_;     // answers to this connection's waits completed by its own request
  std::string payload_;  // an operation's reply in crun's encoding, answered in torch's
  std::unordered_map<Parked*, std::shared_ptr<Parked>> parked_;
  bool detached_ = false;
};

}  // namespace crun
