#include "rendezvous/store_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <future>
#include <thread>
#include <unordered_set>

#include "rendezvous/store.h"
#include "rendezvous/store_keyspace.h"
#include "rendezvous/store_protocol.h"

namespace crun {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using wire::Op;
using wire::Status;

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string timeout_text(std::uint32_t ms) {
  return ms == wire::kForever ? std::string("forever") : std::to_string(ms) + " ms";
}
}  // namespace

class Connection;

struct StoreServer::Impl {
  Impl(asio::io_context& io_ref, StoreServerOptions o) : io(io_ref), opt(std::move(o)), acceptor(io) {}

  void open();
  void accept();
  void close_all();

  std::unique_ptr<asio::io_context> owned_io;
  asio::io_context& io;
  StoreServerOptions opt;
  tcp::acceptor acceptor;
  KeySpace keys;
  std::unordered_set<std::shared_ptr<Connection>> connections;
  std::thread thread;
  std::atomic<std::uint16_t> bound_port{0};
  std::string bound_host;
  std::atomic<bool> stopped{false};
  StoreServerStats stats;
};

// One client connection: handshake, then frames in, replies out. Lives on the server thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(StoreServer::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {
    boost::system::error_code ec;
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : remote.address().to_string() + ":" + std::to_string(remote.port());
  }

  void start() {
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.set_option(asio::socket_base::keep_alive(true), ec);
    int fd = socket_.native_handle();
    int idle = 30, interval = 5, count = 3;  // a vanished peer is noticed within ~45 s
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    arm_timer(server_.opt.handshake_timeout, "handshake not completed");
    read();
  }

  // Refuses a connection over the limit with a handshake status, then closes.
  void refuse_full() {
    std::string reply;
    wire::Writer w(reply);
    w.u32(wire::kMagic);
    w.u16(wire::kVersion);
    w.u16(static_cast<std::uint16_t>(wire::HelloStatus::kServerFull));
    close_after_write_ = true;
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    queue(reply);
    flush();
  }

  void close(const std::string& reason, bool protocol_fault) {
    if (closed_) return;
    closed_ = true;
    if (protocol_fault) {
      ++server_.stats.connections_dropped;
      spdlog::warn("store: dropped connection from {}: {}", peer_, reason);
    } else {
      spdlog::debug("store: connection from {} closed: {}", peer_, reason);
    }
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
    for (auto& p : parked_) {
      p->done = true;
      server_.keys.unpark(p);
      p->timer.cancel();
    }
    parked_.clear();
    for (auto& w : watches_) server_.keys.remove_watch(w);
    watches_.clear();
    server_.keys.release(serial_, ephemeral_);  // after the watches: its own deletes are not echoed to it
    ephemeral_.clear();
    server_.connections.erase(shared_from_this());
  }

  std::size_t parked_count() const { return parked_.size(); }

  // A request parked until its keys exist or its timer fires.
  struct Parked : ParkedRequest, std::enable_shared_from_this<Parked> {
    explicit Parked(asio::io_context& io) : timer(io) {}
    std::weak_ptr<Connection> conn;
    std::uint32_t id = 0;
    Op op = Op::kGet;
    std::uint32_t timeout_ms = 0;
    asio::steady_timer timer;
    void ready() override {
      timer.cancel();
      if (auto c = conn.lock()) c->complete_parked(*this);
    }
  };

  struct ConnWatch : Watch {
    std::weak_ptr<Connection> conn;
    std::uint32_t id = 0;
    void changed(std::uint8_t kind, const std::string& key, const std::string* value) override {
      if (auto c = conn.lock()) c->notify(id, kind, key, value);
    }
  };

 private:
  // Waits for readability, then drains the socket itself: unlike async_read_some this costs no
  // speculative recv() that fails with EAGAIN on every request/reply round trip.
  void read() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
      self->on_readable(ec);
    });
  }

  void on_readable(boost::system::error_code ec) {
    if (closed_) return;
    if (ec) {
      close(ec.message(), false);
      return;
    }
    for (;;) {
      if (in_.size() < used_ + kReadChunk) in_.resize(std::max(used_ + kReadChunk, need_));
      std::size_t space = in_.size() - used_;
      std::size_t n = socket_.read_some(asio::buffer(in_.data() + used_, space), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        bool partial = used_ != 0 || !handshaken_;
        close(ec == asio::error::eof ? (partial ? "peer closed mid-request" : "peer closed") : ec.message(),
              partial && handshaken_);
        return;
      }
      used_ += n;
      progressed_ = true;
      if (n < space) break;  // drained: a later arrival raises a new readiness edge
    }
    in_batch_ = true;
    try {
      process();
      progressed_ = false;
    } catch (const wire::ProtocolError& e) {
      in_batch_ = false;
      close(e.what(), true);
      return;
    }
    in_batch_ = false;
    if (closed_) return;
    flush();
    if (!closed_) read();
  }

  void process() {
    std::size_t pos = 0;
    need_ = 0;
    if (!handshaken_) {
      if (used_ < wire::kPreambleSize) return;
      wire::Reader r(std::string_view(in_.data(), wire::kPreambleSize));
      std::uint32_t magic = r.u32();
      std::uint16_t version = r.u16();
      std::uint16_t token_len = r.u16();
      if (magic != wire::kMagic) throw wire::ProtocolError("bad magic (not a crun store client)");
      if (token_len > wire::kMaxTokenLength) throw wire::ProtocolError("token longer than the limit");
      if (used_ < wire::kPreambleSize + token_len) return;
      std::string_view token(in_.data() + wire::kPreambleSize, token_len);
      auto status = wire::HelloStatus::kOk;
      if (version != wire::kVersion) status = wire::HelloStatus::kBadVersion;
      else if (!server_.opt.token.empty() && !equal_constant_time(token, server_.opt.token)) status = wire::HelloStatus::kBadToken;
      else if (server_.opt.token.empty() && !token.empty()) status = wire::HelloStatus::kOk;  // tolerated
      std::string reply;
      wire::Writer w(reply);
      w.u32(wire::kMagic);
      w.u16(wire::kVersion);
      w.u16(static_cast<std::uint16_t>(status));
      queue(reply);
      if (status != wire::HelloStatus::kOk) {
        ++server_.stats.connections_dropped;
        spdlog::warn("store: rejected connection from {}: {}", peer_, wire::hello_status_name(status));
        close_after_write_ = true;
        used_ = 0;
        return;
      }
      handshaken_ = true;
      pos = wire::kPreambleSize + token_len;
    }
    while (!closed_ && !close_after_write_) {
      if (used_ - pos < wire::kFrameHeaderSize) break;
      std::uint32_t len = wire::decode_frame_length(in_.data() + pos, kMaxFrameSize);
      if (used_ - pos < wire::kFrameHeaderSize + len) {
        need_ = wire::kFrameHeaderSize + len;
        break;
      }
      handle_frame(std::string_view(in_.data() + pos + wire::kFrameHeaderSize, len));
      pos += wire::kFrameHeaderSize + len;
    }
    if (closed_) return;
    if (pos != 0) {
      std::memmove(in_.data(), in_.data() + pos, used_ - pos);
      used_ -= pos;
    }
    if (used_ == 0 && in_.size() > 4 * kReadChunk) {  // give back the room a big frame needed
      in_.resize(kReadChunk);
      in_.shrink_to_fit();
    }
    if (used_ != 0) {
      // Re-armed on every read that made progress: a slow sender is fine, a silent one is not.
      if (progressed_ || !timer_armed_) arm_timer(server_.opt.frame_timeout, "no bytes of an incomplete frame");
    } else if (timer_armed_) {
      timer_armed_ = false;
      timer_.cancel();
    }
  }

  void arm_timer(std::chrono::milliseconds after, const char* what) {
    timer_armed_ = true;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), what, after](boost::system::error_code ec) {
      if (ec || !self->timer_armed_ || self->closed_) return;
      self->close(std::string(what) + " within " + std::to_string(after.count()) + " ms", true);
    });
  }

  static std::vector<std::string> read_keys(wire::Reader& r) {
    std::uint32_t n = r.count(4);
    if (n > kMaxKeysPerRequest) throw wire::ProtocolError("more than " + std::to_string(kMaxKeysPerRequest) + " keys in one request");
    std::vector<std::string> keys;
    keys.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
    return keys;
  }

  // Writes a reply frame whose payload `fill` appends.
  template <typename Fill>
  void reply(Status status, std::uint32_t id, Fill&& fill) {
    std::size_t at = wire::Writer(out_next_).begin_frame(static_cast<std::uint8_t>(status), id);
    wire::Writer w(out_next_);
    fill(w);
    w.finish_frame(at);
    after_queue();
  }
  void reply_ok(std::uint32_t id) {
    reply(Status::kOk, id, [](wire::Writer&) {});
  }
  void reply_error(Status status, std::uint32_t id, const std::string& message) {
    reply(status, id, [&](wire::Writer& w) { w.str(message); });
  }

  bool key_ok(std::string_view key, std::uint32_t id) {
    if (key.size() <= kMaxKeyLength) return true;
    reply_error(Status::kKeyTooLong, id, "key of " + std::to_string(key.size()) + " bytes exceeds " + std::to_string(kMaxKeyLength));
    return false;
  }
  bool value_ok(std::string_view value, std::uint32_t id) {
    if (value.size() <= kMaxValueSize) return true;
    reply_error(Status::kValueTooLarge, id, "value of " + std::to_string(value.size()) + " bytes exceeds " + std::to_string(kMaxValueSize));
    return false;
  }

  void handle_frame(std::string_view body) {
    wire::Reader r(body);
    auto op = static_cast<Op>(r.u8());
    std::uint32_t id = r.u32();
    KeySpace& ks = server_.keys;
    switch (op) {
      case Op::kSet: {
        auto key = r.str();
        auto value = r.str();
        r.expect_done();
        if (key_ok(key, id) && value_ok(value, id)) {
          ks.set(key, value);
          reply_ok(id);
        }
        return;
      }
      case Op::kGet:
      case Op::kWait:
      case Op::kMultiGet: {
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
        for (auto& k : keys)
          if (!key_ok(k, id)) return;
        if (ks.has_all(keys)) {
          answer_blocking(op, id, keys);
          return;
        }
        if (timeout_ms == 0) {
          reply_error(Status::kTimeout, id, "key '" + first_missing(keys) + "' not set within 0 ms");
          return;
        }
        if (parked_.size() >= server_.opt.max_pending_per_connection) {
          reply_error(Status::kTooManyPending, id, "more than " + std::to_string(server_.opt.max_pending_per_connection) + " blocked requests on one connection");
          return;
        }
        park(op, id, std::move(keys), timeout_ms);
        return;
      }
      case Op::kAdd: {
        auto key = r.str();
        std::int64_t delta = r.i64();
        r.expect_done();
        if (!key_ok(key, id)) return;
        try {
          std::int64_t v = ks.add(key, delta);
          reply(Status::kOk, id, [&](wire::Writer& w) { w.i64(v); });
        } catch (const std::invalid_argument& e) {
          reply_error(Status::kNotInteger, id, e.what());
        }
        return;
      }
      case Op::kCompareSet: {
        auto key = r.str();
        auto expected = r.str();
        auto desired = r.str();
        r.expect_done();
        if (!key_ok(key, id) || !value_ok(desired, id)) return;
        std::string now = ks.compare_set(key, expected, desired);
        reply(Status::kOk, id, [&](wire::Writer& w) { w.str(now); });
        return;
      }
      case Op::kCheck: {
        auto keys = read_keys(r);
        r.expect_done();
        bool all = ks.has_all(keys);
        reply(Status::kOk, id, [&](wire::Writer& w) { w.u8(all ? 1 : 0); });
        return;
      }
      case Op::kDelete: {
        auto key = r.str();
        r.expect_done();
        bool existed = ks.remove(key);
        reply(Status::kOk, id, [&](wire::Writer& w) { w.u8(existed ? 1 : 0); });
        return;
      }
      case Op::kNumKeys: {
        auto prefix = r.str();
        r.expect_done();
        std::int64_t n = ks.count(prefix);
        reply(Status::kOk, id, [&](wire::Writer& w) { w.i64(n); });
        return;
      }
      case Op::kMultiSet: {
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
        for (auto& [k, v] : kv)
          if (!key_ok(k, id) || !value_ok(v, id)) return;
        for (auto& [k, v] : kv) ks.set(k, v);
        reply_ok(id);
        return;
      }
      case Op::kAppend: {
        auto key = r.str();
        auto value = r.str();
        r.expect_done();
        if (!key_ok(key, id)) return;
        try {
          std::int64_t len = ks.append(key, value, kMaxValueSize);
          reply(Status::kOk, id, [&](wire::Writer& w) { w.i64(len); });
        } catch (const std::length_error& e) {
          reply_error(Status::kValueTooLarge, id, e.what());
        }
        return;
      }
      case Op::kListKeys: {
        auto prefix = r.str();
        std::uint32_t limit = r.u32();
        r.expect_done();
        auto keys = ks.list(prefix, std::min<std::size_t>(limit, kMaxKeysPerRequest));
        reply(Status::kOk, id, [&](wire::Writer& w) {
          w.u32(static_cast<std::uint32_t>(keys.size()));
          for (auto& k : keys) w.str(k);
        });
        return;
      }
      case Op::kTryGet: {
        auto key = r.str();
        r.expect_done();
        const std::string* v = ks.find(key);
        reply(Status::kOk, id, [&](wire::Writer& w) {
          w.u8(v ? 1 : 0);
          w.str(v ? std::string_view(*v) : std::string_view());
        });
        return;
      }
      case Op::kWatch: {
        auto prefix = r.str();
        r.expect_done();
        if (!key_ok(prefix, id)) return;
        if (watches_.size() >= server_.opt.max_pending_per_connection) {
          reply_error(Status::kTooManyPending, id, "too many watches on one connection");
          return;
        }
        auto w = std::make_shared<ConnWatch>();
        w->prefix = std::string(prefix);
        w->conn = weak_from_this();
        w->id = id;
        watches_.push_back(w);
        ks.add_watch(w);
        reply_ok(id);
        return;
      }
      case Op::kUnwatch: {
        std::uint32_t watch_id = r.u32();
        r.expect_done();
        for (auto it = watches_.begin(); it != watches_.end(); ++it) {
          if ((*it)->id == watch_id) {
            ks.remove_watch(*it);
            watches_.erase(it);
            break;
          }
        }
        reply_ok(id);
        return;
      }
      case Op::kPing:
        r.expect_done();
        reply_ok(id);
        return;
      case Op::kSetEphemeral: {
        auto key = r.str();
        auto value = r.str();
        r.expect_done();
        if (key_ok(key, id) && value_ok(value, id)) {
          if (std::find(ephemeral_.begin(), ephemeral_.end(), key) == ephemeral_.end()) ephemeral_.emplace_back(key);
          ks.set_owned(key, value, serial_);
          reply_ok(id);
        }
        return;
      }
    }
    reply_error(Status::kUnknownOp, id, "unknown operation code " + std::to_string(static_cast<int>(op)));
  }

  std::string first_missing(const std::vector<std::string>& keys) const {
    for (auto& k : keys)
      if (!server_.keys.find(k)) return k;
    return {};
  }

  void answer_blocking(Op op, std::uint32_t id, const std::vector<std::string>& keys) {
    KeySpace& ks = server_.keys;
    if (op == Op::kWait) {
      reply_ok(id);
    } else if (op == Op::kGet) {
      reply(Status::kOk, id, [&](wire::Writer& w) { w.str(*ks.find(keys[0])); });
    } else {
      reply(Status::kOk, id, [&](wire::Writer& w) {
        w.u32(static_cast<std::uint32_t>(keys.size()));
        for (auto& k : keys) w.str(*ks.find(k));
      });
    }
  }

  void park(Op op, std::uint32_t id, std::vector<std::string> keys, std::uint32_t timeout_ms) {
    auto p = std::make_shared<Parked>(server_.io);
    p->keys = std::move(keys);
    p->conn = weak_from_this();
    p->id = id;
    p->op = op;
    p->timeout_ms = timeout_ms;
    parked_.insert(p);
    server_.keys.park(p);
    if (timeout_ms != wire::kForever) {
      p->timer.expires_after(std::chrono::milliseconds(timeout_ms));
      p->timer.async_wait([weak = std::weak_ptr<Parked>(p), self = weak_from_this()](boost::system::error_code ec) {
        auto parked = weak.lock();
        auto conn = self.lock();
        if (ec || !parked || !conn || parked->done) return;
        conn->expire_parked(parked);
      });
    }
  }

 public:
  // Called by KeySpace (through Parked::ready) when the last key of a parked request appears.
  void complete_parked(Parked& p) {
    parked_.erase(p.shared_from_this());
    answer_blocking(p.op, p.id, p.keys);
    flush();
  }

 private:
  void expire_parked(const std::shared_ptr<Parked>& p) {
    p->done = true;
    server_.keys.unpark(p);
    parked_.erase(p);
    reply_error(Status::kTimeout, p->id,
                std::string(wire::op_name(p->op)) + ": key '" + first_missing(p->keys) + "' not set within " + timeout_text(p->timeout_ms));
    flush();
  }

  void notify(std::uint32_t watch_id, std::uint8_t kind, const std::string& key, const std::string* value) {
    reply(Status::kNotify, watch_id, [&](wire::Writer& w) {
      w.u8(kind);
      w.str(key);
      w.str(value ? std::string_view(*value) : std::string_view());
    });
    flush();
  }

  void queue(const std::string& bytes) {
    out_next_.append(bytes);
    after_queue();
  }
  void after_queue() {
    if (out_next_.size() + out_busy_.size() > server_.opt.max_outbound_bytes && !closed_) {
      out_next_.clear();
      close("client is not reading its replies (over " + std::to_string(server_.opt.max_outbound_bytes) + " bytes queued)", true);
    }
  }

  // Writes everything queued: inline while the socket takes it, asynchronously for the rest.
  // Nothing is written while a batch is being processed (its replies leave together) or while an
  // asynchronous write is in flight (order is kept).
  void flush() {
    if (closed_ || writing_ || in_batch_ || out_next_.empty()) return;
    boost::system::error_code ec;
    std::size_t n = socket_.write_some(asio::buffer(out_next_), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
      close("write failed: " + ec.message(), false);
      return;
    }
    if (ec) n = 0;
    if (n == out_next_.size()) {
      out_next_.clear();
      if (close_after_write_) close("handshake refused", false);
      return;
    }
    out_next_.erase(0, n);
    writing_ = true;
    out_busy_.swap(out_next_);
    asio::async_write(socket_, asio::buffer(out_busy_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
      self->writing_ = false;
      self->out_busy_.clear();
      if (self->closed_) return;
      if (ec) {
        self->close("write failed: " + ec.message(), false);
        return;
      }
      if (self->close_after_write_ && self->out_next_.empty()) {
        self->close("handshake refused", false);
        return;
      }
      self->flush();
    });
  }

  friend struct Parked;

  StoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  bool progressed_ = false;  // bytes arrived since the frame timer was last armed
  std::string peer_;
  std::vector<char> in_;
  std::size_t used_ = 0;
  std::size_t need_ = 0;
  bool handshaken_ = false;
  bool closed_ = false;
  bool in_batch_ = false;
  bool writing_ = false;
  bool close_after_write_ = false;
  std::string out_busy_;
  std::string out_next_;
  std::unordered_set<std::shared_ptr<Parked>> parked_;
  std::vector<std::shared_ptr<ConnWatch>> watches_;
  std::vector<std::string> ephemeral_;  // keys this connection set with set_ephemeral
  std::uint64_t serial_ = ++next_serial_;
  static inline std::uint64_t next_serial_ = 0;  // server thread only
};

void run_with_adaptive_polling(asio::io_context& io, std::chrono::microseconds spin) {
  for (;;) {
    if (io.stopped()) return;
    if (io.poll() > 0) {
      auto until = std::chrono::steady_clock::now() + spin;
      while (std::chrono::steady_clock::now() < until && !io.stopped()) {
        if (io.poll() > 0) until = std::chrono::steady_clock::now() + spin;
      }
    }
    if (io.stopped() || io.run_one() == 0) return;
  }
}

void StoreServer::Impl::open() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(opt.host, ec);
  if (ec) throw StoreError("store server: '" + opt.host + "' is not an IP address");
  tcp::endpoint ep(address, opt.port);
  acceptor.open(ep.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(ep, ec);
  if (ec) throw StoreError("store server: cannot listen on " + opt.host + ":" + std::to_string(opt.port) + ": " + ec.message());
  acceptor.listen(asio::socket_base::max_listen_connections);
  bound_port = acceptor.local_endpoint().port();
  bound_host = opt.host;
  accept();
}

void StoreServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      ++stats.connections_accepted;
      auto conn = std::make_shared<Connection>(*this, std::move(socket));
      if (connections.size() >= opt.max_connections) {
        ++stats.connections_dropped;
        spdlog::warn("store: refused a connection: at the limit of {} connections", opt.max_connections);
        conn->refuse_full();
      } else {
        connections.insert(conn);
        conn->start();
      }
    } else if (ec == asio::error::no_descriptors) {
      spdlog::warn("store: accept failed: {} (raise the open-files limit)", ec.message());
    }
    accept();
  });
}

void StoreServer::Impl::close_all() {
  boost::system::error_code ec;
  acceptor.close(ec);
  auto all = connections;  // close() erases from the set
  for (auto& c : all) c->close("server stopping", false);
}

StoreServer::StoreServer(StoreServerOptions options) {
  auto io = std::make_unique<asio::io_context>(1);
  impl_ = std::make_unique<Impl>(*io, std::move(options));
  impl_->owned_io = std::move(io);
  impl_->open();
}

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options)
    : impl_(std::make_unique<Impl>(io, std::move(options))) {
  impl_->open();
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::start() {
  if (!impl_->owned_io || impl_->thread.joinable()) return;
  impl_->thread = std::thread([this] { run_with_adaptive_polling(*impl_->owned_io, std::chrono::microseconds(200)); });
}

void StoreServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->owned_io) {
    if (impl_->thread.joinable()) {
      asio::post(*impl_->owned_io, [this] { impl_->close_all(); });
      impl_->thread.join();
    } else {
      impl_->close_all();
    }
  } else if (impl_->io.get_executor().running_in_this_thread() || impl_->io.stopped()) {
    impl_->close_all();
  } else {
    std::promise<void> done;
    asio::post(impl_->io, [&] {
      impl_->close_all();
      done.set_value();
    });
    done.get_future().wait();
  }
}

std::uint16_t StoreServer::port() const { return impl_->bound_port; }
std::string StoreServer::host() const { return impl_->bound_host; }
std::string StoreServer::endpoint() const {
  const std::string& h = impl_->bound_host;
  return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port());
}

StoreServerStats StoreServer::stats() {
  auto snapshot = [this] {
    StoreServerStats s = impl_->stats;
    s.open_connections = impl_->connections.size();
    s.keys = impl_->keys.size();
    for (auto& c : impl_->connections) s.parked_requests += c->parked_count();
    return s;
  };
  if (impl_->io.get_executor().running_in_this_thread() || (impl_->owned_io && !impl_->thread.joinable())) return snapshot();
  std::promise<StoreServerStats> result;
  asio::post(impl_->io, [&] { result.set_value(snapshot()); });
  return result.get_future().get();
}

}  // namespace crun
