#include "store/tcpstore_dialect.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "store/reply_queue.h"
#include "store/store.h"
#include "store/store_keyspace.h"
#include "store/store_operations.h"
#include "store/store_protocol.h"

namespace crun {

namespace {

// torch's validation magic (TCPStoreBackend.hpp), sent after VALIDATE as a host-order u32.
constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
constexpr std::size_t kValidateSize = 5;  // the code byte and the magic

// Answer bytes of torch's CheckResponseType and WaitResponseType.
constexpr unsigned char kReady = 0, kNotReady = 1;
constexpr unsigned char kStopWaiting = 0, kWaitCanceled = 1;

constexpr unsigned char kLastTorch2Code = 17;  // LIST

// A request cut short: decode() keeps its bytes for the next call.
struct Incomplete {};

void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }  // host is LE
void put_bytes(std::string& out, std::string_view b) {
  put_u64(out, b.size());
  out.append(b);
}

}  // namespace

enum class TcpStoreDialect::Query {
  kValidate, kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kNumKeys, kWatchKey, kDelete, kAppend,
  kMultiGet, kMultiSet, kCancelWait, kPing, kQueuePush, kQueuePop, kQueueLen, kList, kUnknown,
};

// Reads one request's fields; throws Incomplete when the bytes are not all there yet and
// ProtocolError when a declared length would take the request past kMaxFrameSize, the bound of
// one crun frame, or a count is over kMaxKeysPerRequest (before those bytes arrive). The limits
// on keys and values are the operations' (store_operations.h), as for crun's protocol.
class TcpStoreDialect::Cursor {
 public:
  explicit Cursor(std::string_view in) : in_(in) {}
  std::size_t used() const { return pos_; }
  unsigned char u8() { return static_cast<unsigned char>(take(1)[0]); }
  std::uint32_t u32() { return load<std::uint32_t>(); }
  std::uint64_t u64() { return load<std::uint64_t>(); }
  std::int64_t i64() { return load<std::int64_t>(); }
  std::string_view key() { return bytes(); }
  std::string_view value() { return bytes(); }
  std::uint64_t count() {
    std::uint64_t n = u64();
    if (n > kMaxKeysPerRequest) throw wire::ProtocolError("more than " + std::to_string(kMaxKeysPerRequest) + " keys in one request");
    return n;
  }
  std::vector<std::string> keys() {
    std::uint64_t n = count();
    std::vector<std::string> out;
    for (std::uint64_t i = 0; i < n; ++i) out.emplace_back(key());
    return out;
  }

 private:
  std::string_view bytes() {
    std::uint64_t n = u64();
    if (pos_ > kMaxFrameSize || n > kMaxFrameSize - pos_) {
      throw wire::ProtocolError("torch TCPStore request of more than " + std::to_string(kMaxFrameSize) +
                                " bytes (the limit of one request)");
    }
    return take(static_cast<std::size_t>(n));
  }
  std::string_view take(std::size_t n) {
    if (in_.size() - pos_ < n) throw Incomplete{};
    auto out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  template <typename T>
  T load() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
};

struct TcpStoreDialect::Parked : ParkedRequest {
  TcpStoreDialect* owner = nullptr;
  void ready() override {
    if (owner != nullptr) owner->ready(*this);
  }
};

bool TcpStoreDialect::is_torch_first_byte(unsigned char byte) { return byte <= kLastTorch2Code; }

TcpStoreDialect::TcpStoreDialect(KeySpace& keys, std::size_t max_parked, ReplyQueue& out,
                                 std::function<void()> queued_from_outside, std::function<bool()> answered)
    : keys_(keys),
      max_parked_(max_parked),
      out_(out),
      queued_from_outside_(std::move(queued_from_outside)),
      answered_(std::move(answered)) {}

TcpStoreDialect::~TcpStoreDialect() { detach(); }

const char* TcpStoreDialect::version_name() const { return numbering_ == Numbering::kTorch2 ? "torch 2.x" : "torch 1.x"; }

// torch 1.x-2.0 (SET=0 ... WATCH_KEY=7, DELETE_KEY=8) and torch >= 2.2 (VALIDATE=0 in front,
// then the 2.1 list: WATCH_KEY gone, APPEND ... CANCEL_WAIT, then PING, the queues, LIST).
TcpStoreDialect::Query TcpStoreDialect::query_of(unsigned char code) const {
  static constexpr Query kTorch1[] = {Query::kSet,   Query::kCompareSet, Query::kGet,      Query::kAdd,   Query::kCheck,
                                      Query::kWait,  Query::kNumKeys,    Query::kWatchKey, Query::kDelete};
  static constexpr Query kTorch2[] = {
      Query::kValidate,   Query::kSet,      Query::kCompareSet, Query::kGet,       Query::kAdd,      Query::kCheck,
      Query::kWait,       Query::kNumKeys,  Query::kDelete,     Query::kAppend,    Query::kMultiGet, Query::kMultiSet,
      Query::kCancelWait, Query::kPing,     Query::kQueuePush,  Query::kQueuePop,  Query::kQueueLen, Query::kList};
  if (numbering_ == Numbering::kTorch2) return code < std::size(kTorch2) ? kTorch2[code] : Query::kUnknown;
  return code < std::size(kTorch1) ? kTorch1[code] : Query::kUnknown;
}

std::size_t TcpStoreDialect::decode(std::string_view in) {
  std::size_t used = 0;
  while (used < in.size()) {
    std::string_view rest = in.substr(used);
    if (numbering_ == Numbering::kUnknown) {
      // VALIDATE is code 0 and its magic: a 1.x SET (also code 0) would need a key length of
      // about 1 GB to start with the same bytes, so five bytes tell the two apart.
      std::uint32_t magic = kValidationMagic;
      std::string_view expect(reinterpret_cast<const char*>(&magic), 4);
      std::size_t have = std::min<std::size_t>(rest.size(), kValidateSize) - 1;
      if (rest[0] == 0 && rest.substr(1, have) == expect.substr(0, have)) {
        if (rest.size() < kValidateSize) return used;
        numbering_ = Numbering::kTorch2;
        used += kValidateSize;
        continue;
      }
      numbering_ = Numbering::kTorch1;
    }
    Cursor c(rest);
    struct InRequest {
      TcpStoreDialect& d;
      explicit InRequest(TcpStoreDialect& dialect) : d(dialect) { d.in_request_ = true; }
      ~InRequest() { d.in_request_ = false; }
    };
    try {
      InRequest guard(*this);
      handle(query_of(c.u8()), c);
    } catch (const Incomplete&) {
      return used;
    }
    if (!late_.empty()) {
      out_.text().append(late_);
      late_.clear();
    }
    used += c.used();
    if (answered_ && !answered_()) return used;
  }
  return used;
}

// A fresh writer for an operation's reply payload.
wire::Writer TcpStoreDialect::payload() {
  payload_.clear();
  return wire::Writer(payload_);
}

// The outcome of one of crun's operations: a refusal ends the connection with the operation's
// own message (torch's protocol has no error reply); else a reader over the payload, which the
// caller answers in torch's encoding.
wire::Reader TcpStoreDialect::applied(const char* op, wire::Status status) {
  wire::Reader r(payload_);
  if (status == wire::Status::kOk) return r;
  throw wire::ProtocolError(std::string("torch TCPStore ") + op + " refused: " + std::string(r.str()));
}

// Every field is read before the operation runs: a request cut short changes nothing. Each runs
// through crun's operations (store_operations.h), with their limits.
void TcpStoreDialect::handle(Query q, Cursor& c) {
  switch (q) {
    case Query::kSet: {
      auto key = c.key();
      auto value = c.value();
      auto w = payload();
      applied("set", store_ops::set(keys_, key, value, w));
      return;
    }
    case Query::kCompareSet: {
      auto key = c.key();
      auto expected = c.value();
      auto desired = c.value();
      const bool missing = keys_.find(key) == nullptr;
      auto w = payload();
      auto r = applied("compare_set", store_ops::compare_set(keys_, key, expected, desired, w));
      // torch answers a missing key's non-empty expected value with that value (nothing stored).
      return put_bytes(out_.text(), missing && !expected.empty() ? expected : r.str());
    }
    case Query::kGet: return put_value(c.key());
    case Query::kAdd: {
      auto key = c.key();
      std::int64_t delta = c.i64();
      auto w = payload();
      return put_u64(out_.text(), static_cast<std::uint64_t>(applied("add", store_ops::add(keys_, key, delta, w)).i64()));
    }
    case Query::kCheck: {
      auto names = c.keys();
      auto w = payload();
      const bool all = applied("check", store_ops::check(keys_, names, w)).u8() != 0;
      out_.text().push_back(static_cast<char>(all ? kReady : kNotReady));
      return;
    }
    case Query::kWait: return wait(c);
    case Query::kNumKeys: {
      auto w = payload();
      return put_u64(out_.text(), static_cast<std::uint64_t>(applied("num_keys", store_ops::num_keys(keys_, "", w)).i64()));
    }
    case Query::kDelete: {
      auto key = c.key();
      auto w = payload();
      return put_u64(out_.text(), applied("delete", store_ops::remove(keys_, key, w)).u8());
    }
    case Query::kAppend: {
      auto key = c.key();
      auto value = c.value();
      auto w = payload();
      applied("append", store_ops::append(keys_, key, value, w));
      return;
    }
    case Query::kMultiGet: {
      auto names = c.keys();
      for (auto& k : names) put_value(k);
      return;
    }
    case Query::kMultiSet: {
      std::uint64_t n = c.count();
      std::vector<std::pair<std::string_view, std::string_view>> items;
      for (std::uint64_t i = 0; i < n; ++i) {
        auto key = c.key();
        items.emplace_back(key, c.value());
      }
      auto w = payload();
      applied("multi_set", store_ops::multi_set(keys_, items, w));
      return;
    }
    case Query::kCancelWait:
      cancel_waits();
      out_.text().push_back(static_cast<char>(kWaitCanceled));
      return;
    case Query::kPing: {
      std::uint32_t nonce = c.u32();
      out_.text().append(reinterpret_cast<const char*>(&nonce), 4);
      return;
    }
    case Query::kList: {  // every key, up to what one list_keys answers
      auto w = payload();
      auto r = applied("list", store_ops::list_keys(keys_, "", kMaxKeysPerRequest, w));
      const std::uint32_t n = r.u32();
      put_u64(out_.text(), n);
      for (std::uint32_t i = 0; i < n; ++i) put_bytes(out_.text(), r.str());
      return;
    }
    case Query::kValidate: throw wire::ProtocolError("torch TCPStore VALIDATE after the first request");
    case Query::kWatchKey: throw wire::ProtocolError("torch TCPStore watch_key is not supported by crun's store");
    case Query::kQueuePush:
    case Query::kQueuePop:
    case Query::kQueueLen: throw wire::ProtocolError("torch TCPStore queues are not supported by crun's store");
    case Query::kUnknown: break;
  }
  throw wire::ProtocolError(std::string("unknown ") + version_name() + " TCPStore query code");
}

// A value as torch answers it (empty when missing; crun's try_get): a large one referenced, not copied.
void TcpStoreDialect::put_value(std::string_view key) {
  store_ops::SharedValues shared;
  auto w = payload();
  auto r = applied("get", store_ops::try_get(keys_, key, w, &shared));
  r.u8();  // found or not: the value is empty when not
  if (shared.empty()) return put_bytes(out_.text(), r.str());
  put_u64(out_.text(), r.u32());
  out_.append_shared(std::move(shared.front().second));
}

// crun's blocking read with no server-side timeout: answered now, or parked until every key is set.
void TcpStoreDialect::wait(Cursor& c) {
  auto names = c.keys();
  auto w = payload();
  if (auto status = store_ops::read_now(keys_, wire::Op::kWait, names, wire::kForever, w)) {
    applied("wait", *status);
    out_.text().push_back(static_cast<char>(kStopWaiting));
    return;
  }
  if (parked_.size() >= max_parked_) {
    throw wire::ProtocolError("more than " + std::to_string(max_parked_) + " torch TCPStore waits parked on one connection");
  }
  auto p = std::make_shared<Parked>();
  p->keys = std::move(names);
  p->owner = this;
  parked_.emplace(p.get(), p);
  keys_.park(p);
}

// Called by the KeySpace (Parked::ready) when the last key of a parked wait appeared.
void TcpStoreDialect::ready(Parked& p) {
  auto keep = parked_.at(&p);
  parked_.erase(&p);
  p.owner = nullptr;
  if (in_request_) {
    late_.push_back(static_cast<char>(kStopWaiting));
    return;
  }
  out_.text().push_back(static_cast<char>(kStopWaiting));
  if (queued_from_outside_) queued_from_outside_();
}

void TcpStoreDialect::cancel_waits() {
  for (auto& [raw, p] : parked_) {
    p->owner = nullptr;
    p->done = true;
    keys_.unpark(p);
  }
  parked_.clear();
}

void TcpStoreDialect::detach() {
  if (detached_) return;
  detached_ = true;
  cancel_waits();
}

}  // namespace crun
