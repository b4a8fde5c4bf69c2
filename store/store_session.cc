#include "store/store_session.h"

#include <algorithm>
#include <cstring>

#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_operations.h"
#include "store/tcpstore_dialect.h"

namespace crun {

using wire::Op;
using wire::Status;

namespace {

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::vector<std::string> read_keys(wire::Reader& r) {
  std::uint32_t n = r.count(4);
  if (n > kMaxKeysPerRequest) throw wire::ProtocolError("more than " + std::to_string(kMaxKeysPerRequest) + " keys in one request");
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
  return keys;
}

constexpr std::size_t kMaxPreamble = wire::kPreambleSize + wire::kMaxTokenLength;

}  // namespace

// A blocking request waiting in the KeySpace. `session` is cleared when the session lets go of
// it, so a KeySpace that still holds it never calls into a session that is gone.
struct StoreSession::Parked : ParkedRequest {
  StoreSession* session = nullptr;
  std::uint32_t id = 0;
  Op op = Op::kGet;
  std::uint32_t timeout_ms = 0;
  std::multimap<Clock::time_point, Parked*>::iterator deadline;
  bool has_deadline = false;
  void ready() override {
    if (session != nullptr) session->complete(*this);
  }
};

struct StoreSession::SessionWatch : Watch {
  StoreSession* session = nullptr;
  std::uint32_t id = 0;
  void changed(std::uint8_t kind, const std::string& key, const std::string* value) override {
    if (session != nullptr) session->notify(id, kind, key, value);
  }
};

StoreSession::StoreSession(KeySpace& keys, const SessionLimits& limits, std::uint64_t serial,
                           std::function<void()> output_ready, ReplyBudget* replies)
    : keys_(keys),
      limits_(limits),
      serial_(serial),
      output_ready_(std::move(output_ready)),
      replies_(replies),
      out_(replies) {
  if (replies_ != nullptr) replies_->enter(*this);
}

StoreSession::~StoreSession() { detach(); }

// ---- input ----------------------------------------------------------------------------------

std::span<char> StoreSession::input_space() {
  // Before the handshake nothing beyond the largest preamble is read; after it, kFirstRead into an
  // empty buffer (an idle connection's next request), else one chunk more than what is buffered
  // (the vector's growth keeps this amortised); never what a header claims.
  std::size_t want = !handshaken_ ? kMaxPreamble - std::min(used_, kMaxPreamble)
                     : used_ == 0 && !read_full_ ? kFirstRead
                                                 : kReadChunk;
  if (in_.size() < used_ + want) in_.resize(used_ + want);
  offered_ = want;
  return {in_.data() + used_, want};
}

void StoreSession::received(std::size_t n, Clock::time_point now) {
  read_full_ = n == offered_;
  used_ += n;
  now_ = now;
  if (ended()) {
    used_ = 0;
    return;
  }
  try {
    decode();
  } catch (const wire::ProtocolError& e) {
    end(e.what(), true);
  }
  if (ended()) used_ = 0;
  // Give back the room a big frame needed, also when part of the next frame is buffered: the
  // buffer stays within 4 x (what is buffered + one read chunk).
  if (used_ == 0 && !read_full_) {
    std::vector<char>().swap(in_);  // idle: no buffer until the next bytes
  } else if (in_.capacity() > 4 * (used_ + kReadChunk)) {
    in_.resize(used_);
    in_.shrink_to_fit();
  }
}

void StoreSession::decode() {
  if (!handshaken_ && !pick_protocol()) return;
  std::size_t pos = torch_ ? decode_torch() : decode_crun();
  if (ended()) return;
  if (pos != 0) {
    std::memmove(in_.data(), in_.data() + pos, used_ - pos);
    used_ -= pos;
  }
}

// The bytes used: the preamble (once) and every complete frame.
std::size_t StoreSession::decode_crun() {
  std::size_t pos = 0;
  if (!handshaken_) {
    pos = decode_handshake();
    if (pos == 0) return 0;
  }
  while (!ended() && used_ - pos >= wire::kFrameHeaderSize) {
    std::uint32_t len = wire::decode_frame_length(in_.data() + pos, kMaxFrameSize);
    if (used_ - pos < wire::kFrameHeaderSize + len) break;
    handle_frame(std::string_view(in_.data() + pos + wire::kFrameHeaderSize, len));
    pos += wire::kFrameHeaderSize + len;
  }
  return pos;
}

// The bytes of every complete TCPStore request; its waits completed meanwhile by this
// connection's own requests are answered by the dialect, not through output_ready.
std::size_t StoreSession::decode_torch() {
  in_request_ = true;
  struct Done {
    StoreSession& s;
    ~Done() {
      s.in_request_ = false;
      s.check_outbound();
    }
  } done{*this};
  return torch_->decode(std::string_view(in_.data(), used_));
}

// The first byte: crun's magic stays here; a TCPStore query code goes to the torch dialect
// (handshaken from then on: it has no preamble). False when nothing can be decoded yet.
bool StoreSession::pick_protocol() {
  if (used_ == 0) return false;
  auto first = static_cast<unsigned char>(in_[0]);
  if (first == (wire::kMagic & 0xFFu)) return true;
  if (!TcpStoreDialect::is_torch_first_byte(first)) {
    throw wire::ProtocolError("bad magic (neither a crun store client nor a torch TCPStore client)");
  }
  if (!limits_.token.empty()) {
    end("torch TCPStore client refused: this store requires a token", true);
    return false;
  }
  torch_ = std::make_unique<TcpStoreDialect>(
      keys_, limits_.max_pending, out_, [this] { queued_from_outside(); },
      [this] {
        check_outbound();
        return !ended();
      });
  handshaken_ = true;
  return true;
}

std::string StoreSession::protocol() const {
  if (torch_) return torch_->version_name();
  return handshaken_ ? "crun" : "";
}

std::size_t StoreSession::parked() const { return parked_.size() + (torch_ ? torch_->parked() : 0); }

// The preamble's size once a valid handshake was answered with OK, else 0; throws for a peer
// that is not a crun client.
std::size_t StoreSession::decode_handshake() {
  if (used_ < wire::kPreambleSize) return 0;
  wire::Reader r(std::string_view(in_.data(), wire::kPreambleSize));
  std::uint32_t magic = r.u32();
  std::uint16_t version = r.u16();
  std::uint16_t token_len = r.u16();
  if (magic != wire::kMagic) throw wire::ProtocolError("bad magic (not a crun store client)");
  if (token_len > wire::kMaxTokenLength) throw wire::ProtocolError("token longer than the limit");
  if (used_ < wire::kPreambleSize + token_len) return 0;
  std::string_view token(in_.data() + wire::kPreambleSize, token_len);
  auto status = wire::HelloStatus::kOk;
  if (version != wire::kVersion) {
    status = wire::HelloStatus::kBadVersion;
  } else if (!limits_.token.empty() && !equal_constant_time(token, limits_.token)) {
    status = wire::HelloStatus::kBadToken;
  }  // a token sent to a server without one is tolerated
  wire::Writer w(out_.text());
  w.u32(wire::kMagic);
  w.u16(wire::kVersion);
  w.u16(static_cast<std::uint16_t>(status));
  if (status != wire::HelloStatus::kOk) {
    flush_before_close_ = true;
    end(std::string("rejected: ") + wire::hello_status_name(status), true);
    return 0;
  }
  handshaken_ = true;
  return wire::kPreambleSize + token_len;
}

void StoreSession::end(std::string reason, bool fault) {
  if (ended()) return;
  end_reason_ = std::move(reason);
  fault_ = fault;
}

// ---- requests -------------------------------------------------------------------------------

void StoreSession::handle_frame(std::string_view body) {
  wire::Reader r(body);
  auto op = static_cast<Op>(r.u8());
  std::uint32_t id = r.u32();
  in_request_ = true;
  struct Done {
    StoreSession& s;
    ~Done() {
      s.in_request_ = false;
      if (!s.own_notes_.empty()) {
        s.out_.text().append(s.own_notes_);
        s.own_notes_.clear();
      }
      s.check_outbound();
    }
  } done{*this};
  switch (op) {
    case Op::kSet: return op_set(id, r, false);
    case Op::kSetEphemeral: return op_set(id, r, true);
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet: return op_blocking(op, id, r);
    case Op::kAdd: return op_add(id, r);
    case Op::kCompareSet: return op_compare_set(id, r);
    case Op::kCheck: return op_check(id, r);
    case Op::kDelete: return op_delete(id, r);
    case Op::kNumKeys: return op_num_keys(id, r);
    case Op::kMultiSet: return op_multi_set(id, r);
    case Op::kAppend: return op_append(id, r);
    case Op::kListKeys: return op_list_keys(id, r);
    case Op::kTryGet: return op_try_get(id, r);
    case Op::kWatch: return op_watch(id, r);
    case Op::kUnwatch: return op_unwatch(id, r);
    case Op::kPing:
      r.expect_done();
      return queue_reply(id, Status::kOk);
  }
  queue_reply(id, store_ops::error(Status::kUnknownOp, "unknown operation code " + std::to_string(static_cast<int>(op)),
                                   payload_));
}

void StoreSession::op_set(std::uint32_t id, wire::Reader& r, bool ephemeral) {
  auto key = r.str();
  auto value = r.str();
  r.expect_done();
  queue_reply(id, ephemeral ? store_ops::set_ephemeral(keys_, key, value, serial_, ephemeral_, payload_)
                            : store_ops::set(keys_, key, value, payload_));
}

void StoreSession::op_blocking(Op op, std::uint32_t id, wire::Reader& r) {
  std::vector<std::string> keys;
  std::uint32_t timeout_ms;
  if (op == Op::kGet) {
    keys.emplace_back(r.str());
    timeout_ms = r.u32();
  } else {
    timeout_ms = r.u32();
    keys = read_keys(r);
  }
  r.expect_done();
  if (auto status = store_ops::read_now(keys_, op, keys, timeout_ms, payload_, &reply_shared_)) {
    return queue_reply(id, *status);
  }
  if (parked_.size() >= limits_.max_pending) {
    return queue_reply(id, store_ops::error(Status::kTooManyPending,
                                            "more than " + std::to_string(limits_.max_pending) +
                                                " blocked requests on one connection",
                                            payload_));
  }
  park(op, id, std::move(keys), timeout_ms);
}

void StoreSession::op_add(std::uint32_t id, wire::Reader& r) {
  auto key = r.str();
  std::int64_t delta = r.i64();
  r.expect_done();
  queue_reply(id, store_ops::add(keys_, key, delta, payload_));
}

void StoreSession::op_compare_set(std::uint32_t id, wire::Reader& r) {
  auto key = r.str();
  auto expected = r.str();
  auto desired = r.str();
  r.expect_done();
  queue_reply(id, store_ops::compare_set(keys_, key, expected, desired, payload_));
}

void StoreSession::op_check(std::uint32_t id, wire::Reader& r) {
  auto keys = read_keys(r);
  r.expect_done();
  queue_reply(id, store_ops::check(keys_, keys, payload_));
}

void StoreSession::op_delete(std::uint32_t id, wire::Reader& r) {
  auto key = r.str();
  r.expect_done();
  queue_reply(id, store_ops::remove(keys_, key, payload_));
}

void StoreSession::op_num_keys(std::uint32_t id, wire::Reader& r) {
  auto prefix = r.str();
  r.expect_done();
  queue_reply(id, store_ops::num_keys(keys_, prefix, payload_));
}

void StoreSession::op_multi_set(std::uint32_t id, wire::Reader& r) {
  std::uint32_t n = r.count(8);
  if (n > kMaxKeysPerRequest) throw wire::ProtocolError("more than " + std::to_string(kMaxKeysPerRequest) + " keys in one request");
  std::vector<std::pair<std::string_view, std::string_view>> kv;
  kv.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto k = r.str();
    auto v = r.str();
    kv.emplace_back(k, v);
  }
  r.expect_done();
  queue_reply(id, store_ops::multi_set(keys_, kv, payload_));
}

void StoreSession::op_append(std::uint32_t id, wire::Reader& r) {
  auto key = r.str();
  auto value = r.str();
  r.expect_done();
  queue_reply(id, store_ops::append(keys_, key, value, payload_));
}

void StoreSession::op_list_keys(std::uint32_t id, wire::Reader& r) {
  auto prefix = r.str();
  std::uint32_t limit = r.u32();
  r.expect_done();
  queue_reply(id, store_ops::list_keys(keys_, prefix, limit, payload_));
}

void StoreSession::op_try_get(std::uint32_t id, wire::Reader& r) {
  auto key = r.str();
  r.expect_done();
  queue_reply(id, store_ops::try_get(keys_, key, payload_, &reply_shared_));
}

void StoreSession::op_watch(std::uint32_t id, wire::Reader& r) {
  auto prefix = r.str();
  r.expect_done();
  auto w = std::make_shared<SessionWatch>();
  w->prefix = std::string(prefix);
  w->session = this;
  w->id = id;
  Status status = store_ops::watch(keys_, w, watches_.size(), limits_.max_pending, payload_);
  if (status == Status::kOk) watches_.push_back(std::move(w));
  queue_reply(id, status);
}

// A watch is the connection's own: unwatch looks it up among this session's watches.
void StoreSession::op_unwatch(std::uint32_t id, wire::Reader& r) {
  std::uint32_t watch_id = r.u32();
  r.expect_done();
  for (auto it = watches_.begin(); it != watches_.end(); ++it) {
    if ((*it)->id == watch_id) {
      (*it)->session = nullptr;
      keys_.remove_watch(*it);
      watches_.erase(it);
      break;
    }
  }
  queue_reply(id, Status::kOk);
}

// ---- replies --------------------------------------------------------------------------------

// Frames the payload an operation wrote to reply_ (and reply_shared_) as the reply to request
// `id`. The payload is gathered apart from out_ because a mutation may complete a parked request
// of this session, whose reply goes to out_ first; operations write it only outside KeySpace
// callbacks, so reply_ is empty whenever complete() runs.
void StoreSession::queue_reply(std::uint32_t id, Status status) {
  wire::Writer w(out_.text());
  std::size_t at = w.begin_frame(static_cast<std::uint8_t>(status), id);
  if (reply_shared_.empty()) {
    out_.text().append(reply_);
    w.finish_frame(at);
  } else {
    queue_payload_with_shared(at);
  }
  reply_.clear();
  if (reply_.capacity() > kReadChunk) std::string().swap(reply_);  // a big value's room goes back
}

// The payload with its large values referenced where their bytes belong; the frame's length
// (at `frame_at`) counts them.
void StoreSession::queue_payload_with_shared(std::size_t frame_at) {
  std::string& text = out_.text();
  std::size_t length = wire::kBodyHeaderSize + reply_.size();
  std::size_t copied = 0;
  for (auto& [offset, value] : reply_shared_) {
    text.append(reply_, copied, offset - copied);
    copied = offset;
    length += value->bytes.size();
    out_.append_shared(std::move(value));
  }
  text.append(reply_, copied);
  reply_shared_.clear();
  const auto length32 = static_cast<std::uint32_t>(length);
  std::memcpy(text.data() + frame_at, &length32, sizeof length32);
}

// ---- parked requests ------------------------------------------------------------------------

void StoreSession::park(Op op, std::uint32_t id, std::vector<std::string> keys, std::uint32_t timeout_ms) {
  auto p = std::make_shared<Parked>();
  p->keys = std::move(keys);
  p->session = this;
  p->id = id;
  p->op = op;
  p->timeout_ms = timeout_ms;
  if (timeout_ms != wire::kForever) {
    p->deadline = deadlines_.emplace(now_ + std::chrono::milliseconds(timeout_ms), p.get());
    p->has_deadline = true;
  }
  parked_.emplace(p.get(), p);
  keys_.park(p);
}

// Called by the KeySpace (Parked::ready) when the last key of a parked request appeared.
void StoreSession::complete(Parked& p) {
  auto keep = parked_.at(&p);
  parked_.erase(&p);
  if (p.has_deadline) deadlines_.erase(p.deadline);
  p.session = nullptr;
  if (ended()) return;
  queue_reply(p.id, store_ops::read_ready(keys_, p.op, p.keys, payload_, &reply_shared_));
  queued_from_outside();
}

std::optional<StoreSession::Clock::time_point> StoreSession::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void StoreSession::expire(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    Parked* raw = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto p = parked_.at(raw);
    parked_.erase(raw);
    p->has_deadline = false;
    p->session = nullptr;
    p->done = true;
    keys_.unpark(p);
    queue_reply(p->id, store_ops::read_timed_out(keys_, p->op, p->keys, p->timeout_ms, payload_));
  }
  check_outbound();
}

// ---- output ---------------------------------------------------------------------------------

void StoreSession::notify(std::uint32_t watch_id, std::uint8_t kind, const std::string& key, const std::string* value) {
  if (ended()) return;
  wire::Writer w(in_request_ ? own_notes_ : out_.text());
  std::size_t at = w.begin_frame(static_cast<std::uint8_t>(Status::kNotify), watch_id);
  w.u8(kind);
  w.str(key);
  w.str(value ? std::string_view(*value) : std::string_view());
  w.finish_frame(at);
  queued_from_outside();
}

// Output queued by another connection's request (or by this one's, which handle_frame covers).
void StoreSession::queued_from_outside() {
  if (in_request_) return;
  check_outbound();
  if (output_ready_) output_ready_();  // also when the session just ended: the owner closes it
}

// The connection's own limit, then the bound over all connections (which may evict another
// session, or this one).
void StoreSession::check_outbound() {
  if (ended()) return;
  const std::size_t weight = out_.size() + own_notes_.size() + in_flight_;
  if (weight > limits_.max_outbound_bytes) {
    out_.clear();
    own_notes_.clear();
    end("client is not reading its replies (over " + std::to_string(limits_.max_outbound_bytes) + " bytes queued)", true);
    return;
  }
  if (replies_ == nullptr) return;
  replies_->hold(*this, out_.text_size() + own_notes_.size() + in_flight_copied_, weight);
  replies_->enforce();
}

// Out of the budget already (ReplyBudget::enforce).
void StoreSession::evict(std::size_t weight, std::size_t bound) {
  out_.clear();
  own_notes_.clear();
  end("client is not reading its replies (" + std::to_string(weight) +
          " bytes queued when the replies queued for all connections passed the bound of " + std::to_string(bound) +
          " bytes)",
      true);
  if (output_ready_) output_ready_();
}

void StoreSession::take_output(ReplyQueue& into) {
  into.clear();
  into.swap(out_);
}

// Bytes only move from queued to in flight, or leave: nothing to enforce.
void StoreSession::set_in_flight(std::size_t bytes, std::size_t copied) {
  in_flight_ = bytes;
  in_flight_copied_ = copied;
  if (ended()) return;
  const std::size_t weight = out_.size() + own_notes_.size() + in_flight_;
  if (weight > limits_.max_outbound_bytes) return check_outbound();
  if (replies_ != nullptr) replies_->hold(*this, out_.text_size() + own_notes_.size() + in_flight_copied_, weight);
}

// ---- teardown -------------------------------------------------------------------------------

void StoreSession::detach() {
  if (detached_) return;
  detached_ = true;
  if (replies_ != nullptr) replies_->leave(*this);
  if (torch_) torch_->detach();
  for (auto& [raw, p] : parked_) {
    p->session = nullptr;
    p->done = true;
    keys_.unpark(p);
  }
  parked_.clear();
  deadlines_.clear();
  for (auto& w : watches_) {
    w->session = nullptr;
    keys_.remove_watch(w);
  }
  watches_.clear();
  // After the watches: its own deletes are not echoed to it. Deferred by the KeySpace when a
  // notification is running.
  keys_.release(serial_, std::move(ephemeral_));
  ephemeral_.clear();
}

}  // namespace crun
