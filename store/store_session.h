// StoreSession: crun's store protocol for one client connection, as bytes in and bytes out.
//
// Contract
//   - The first byte picks the protocol: crun's magic, or a TCPStore query code (torch's
//     TCPStore clients: the session hands every byte to a TcpStoreDialect, tcpstore_dialect.h).
//     A store with a token refuses TCPStore clients (they cannot present it); any other first
//     byte ends the session.
//   - The owner (the server's connection) reads into input_space() and then calls received(n,
//     now). The session checks the handshake, decodes every complete frame and runs its request
//     against the KeySpace with the operation's function (store_operations.h); replies are
//     queued as output. Parked requests, watches and ephemeral keys are the session's state.
//   - Memory follows the bytes actually received: before the handshake the input buffer holds at
//     most the preamble and a token (about 1 KiB); after it, at most 4 x (the buffered bytes + one
//     read chunk) once received() returns, whatever size a frame header declares and however big
//     the frames before were, and none at all once every byte received was decoded (an idle
//     connection holds no input buffer: 10,000 of them cost no 64 KiB each). The first read after
//     that offers kFirstRead bytes, the next kReadChunk when the first came full.
//   - Blocking requests (get, wait, multi_get) park in the KeySpace; next_deadline() says when the
//     owner must call expire(now) to time them out. Watches queue notifications. A notification
//     caused by this connection's own request follows that request's reply.
//   - Output: the owner moves queued bytes to its socket with take_output() and tells the session
//     how many bytes it still has in flight (set_in_flight); queued + in flight beyond
//     max_outbound_bytes ends the session (a client that does not read its replies). A reply with
//     a large stored value (get, multi_get, try_get; TCPStore GET, MULTI_GET) references the
//     value's bytes instead of copying them (reply_queue.h).
//   - With a ReplyBudget (the server's bound on replies queued over all connections), the session
//     is one of its holders from construction to detach(): after each request, expiry or output
//     queued from outside it records what it holds and enforces the bound, which may evict the
//     heaviest session, this one or another. An evicted session drops its queued output, ends
//     (a fault: "not reading its replies") and calls output_ready, also from inside a request,
//     so that the owner lets go of its bytes in flight and closes it.
//   - ended(): set once the session must close (protocol violation, refused handshake, unread
//     replies); the reason is one line and fault() tells whether it counts as the client's
//     misbehaviour. Nothing is decoded after that. When flush_before_close() is true (a refused
//     handshake), the owner writes the queued reply before closing.
//   - Output queued outside received()/expire() — a parked request completed or a watch fired by
//     another connection's write — calls the output_ready hook, so that the owner can write it
//     (or close the session, if that output ended it). The hook runs inside a KeySpace callback
//     (or inside the request that evicted the session): it must not destroy the session.
//   - detach() (also run by the destructor) takes everything the session holds out of the
//     KeySpace: parked requests, watches, ephemeral keys. It may run inside a KeySpace callback.
//
// Threading
//   The server's event-loop thread only, like its KeySpace.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/reply_budget.h"
#include "store/reply_queue.h"
#include "store/store_operations.h"
#include "store/store_protocol.h"

namespace crun {

class KeySpace;
class TcpStoreDialect;

struct SessionLimits {
  std::string token;                               // non-empty: the handshake must present it
  std::size_t max_pending = 1024;                  // parked requests, and watches, per session
  std::size_t max_outbound_bytes = 256u << 20;     // queued + in flight
};

class StoreSession : private ReplyBudget::Holder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kReadChunk = 64 * 1024;
  static constexpr std::size_t kFirstRead = 2 * 1024;

  StoreSession(KeySpace& keys, const SessionLimits& limits, std::uint64_t serial, std::function<void()> output_ready,
               ReplyBudget* replies = nullptr);
  ~StoreSession() override;
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  // Input.
  std::span<char> input_space();
  void received(std::size_t n, Clock::time_point now);
  std::size_t buffered() const { return used_; }  // bytes of an incomplete preamble or frame
  std::size_t buffer_capacity() const { return in_.capacity(); }
  bool handshaken() const { return handshaken_; }
  // The protocol this session speaks: "crun", "torch 1.x", "torch 2.x", or "" before the first byte.
  std::string protocol() const;

  // Parked-request deadlines.
  std::optional<Clock::time_point> next_deadline() const;
  void expire(Clock::time_point now);
  std::size_t parked() const;

  // Output.
  bool has_output() const { return !out_.empty(); }
  // Swaps the queued bytes into `into` (same budget), which must be empty (its room is reused).
  void take_output(ReplyQueue& into);
  // `bytes` still to be sent of what take_output() gave, of which `copied` are the queue's own
  // (ReplyQueue::text_size(): what it holds beside shared values).
  void set_in_flight(std::size_t bytes, std::size_t copied);

  // End of the session.
  bool ended() const { return !end_reason_.empty(); }
  const std::string& end_reason() const { return end_reason_; }
  bool fault() const { return fault_; }
  bool flush_before_close() const { return flush_before_close_; }
  void detach();

 private:
  struct Parked;
  struct SessionWatch;

  void decode();
  std::size_t decode_crun();
  std::size_t decode_torch();
  std::size_t decode_handshake();
  bool pick_protocol();
  void handle_frame(std::string_view body);
  void end(std::string reason, bool fault);

  // One function per operation: each decodes its payload from `r`, runs the operation
  // (store_operations.h) and queues its reply, or parks a blocking read.
  void op_set(std::uint32_t id, wire::Reader& r, bool ephemeral);
  void op_blocking(wire::Op op, std::uint32_t id, wire::Reader& r);
  void op_add(std::uint32_t id, wire::Reader& r);
  void op_compare_set(std::uint32_t id, wire::Reader& r);
  void op_check(std::uint32_t id, wire::Reader& r);
  void op_delete(std::uint32_t id, wire::Reader& r);
  void op_num_keys(std::uint32_t id, wire::Reader& r);
  void op_multi_set(std::uint32_t id, wire::Reader& r);
  void op_append(std::uint32_t id, wire::Reader& r);
  void op_list_keys(std::uint32_t id, wire::Reader& r);
  void op_try_get(std::uint32_t id, wire::Reader& r);
  void op_watch(std::uint32_t id, wire::Reader& r);
  void op_unwatch(std::uint32_t id, wire::Reader& r);

  void queue_reply(std::uint32_t id, wire::Status status);
  void queue_payload_with_shared(std::size_t frame_at);
  void park(wire::Op op, std::uint32_t id, std::vector<std::string> keys, std::uint32_t timeout_ms);
  void complete(Parked& p);
  void notify(std::uint32_t watch_id, std::uint8_t kind, const std::string& key, const std::string* value);
  void queued_from_outside();
  void check_outbound();
  void evict(std::size_t weight, std::size_t bound) override;

  KeySpace& keys_;
  const SessionLimits& limits_;
  std::uint64_t serial_;
  std::function<void()> output_ready_;
  ReplyBudget* replies_;  // null: no bound over all connections
  Clock::time_point now_{};

  std::vector<char> in_;
  std::size_t used_ = 0;
  std::size_t offered_ = 0;  // what the last input_space() offered
  bool read_full_ = false;   // the last read filled what was offered: more is likely waiting
  bool handshaken_ = false;
  std::unique_ptr<TcpStoreDialect> torch_;  // set when the first byte was a TCPStore query code

  bool in_request_ = false;  // a request of this session is being handled
  ReplyQueue out_;
  std::string own_notes_;    // notifications caused by the request being handled
  std::string reply_;        // the payload of the reply being built
  wire::Writer payload_{reply_};
  store_ops::SharedValues reply_shared_;  // its large values, referenced
  std::size_t in_flight_ = 0;
  std::size_t in_flight_copied_ = 0;

  std::unordered_map<Parked*, std::shared_ptr<Parked>> parked_;
  std::multimap<Clock::time_point, Parked*> deadlines_;
  std::vector<std::shared_ptr<SessionWatch>> watches_;
  std::vector<std::string> ephemeral_;  // keys set with set_ephemeral
  bool detached_ = false;

  std::string end_reason_;
  bool fault_ = false;
  bool flush_before_close_ = false;
};

}  // namespace crun
