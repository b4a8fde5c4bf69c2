#include "store/store_client.h"

#include <charconv>

#include "store/store_connection.h"

namespace crun {

using wire::Op;
using wire::Status;

std::string StoreEndpoint::str() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StoreEndpoint StoreEndpoint::parse(std::string_view text) {
  auto bad = [&](const char* why) {
    return std::invalid_argument("endpoint '" + std::string(text) + "': " + why + " (expected host:port)");
  };
  std::string_view host, port;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') throw bad("malformed IPv6 address");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) throw bad("IPv6 addresses need brackets");
  }
  if (host.empty()) throw bad("empty host");
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || ptr != port.data() + port.size() || port.empty() || value > 65535) throw bad("port is not a number in 0..65535");
  return StoreEndpoint{std::string(host), static_cast<std::uint16_t>(value)};
}

void ConnectCancel::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}
bool ConnectCancel::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}
bool ConnectCancel::wait_for(Millis d) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, d, [&] { return cancelled_; });
}

struct TcpStore::Impl {
  Impl(StoreEndpoint ep, StoreClientOptions opt) : endpoint(std::move(ep)), options(std::move(opt)), conn(endpoint, options) {}

  StoreEndpoint endpoint;
  StoreClientOptions options;
  StoreConnection conn;
  std::uint32_t next_id = 1;
  std::string broken;  // non-empty once a call failed mid-flight: the reply stream is lost
  std::string out;

  // Encodes a request; returns its id.
  template <typename Fill>
  std::uint32_t encode(Op op, Fill&& fill) {
    std::uint32_t id = next_id++;
    wire::Writer w(out);
    std::size_t at = w.begin_frame(static_cast<std::uint8_t>(op), id);
    fill(w);
    w.finish_frame(at);
    return id;
  }

  static std::uint32_t to_wire_timeout(Millis t) {
    if (t.count() < 0) return 0;
    if (t.count() >= static_cast<long long>(wire::kForever)) return wire::kForever;
    return static_cast<std::uint32_t>(t.count());
  }

  // The client gives the server its own deadline plus slack to answer before calling it dead.
  Clock::time_point reply_deadline(Millis server_timeout) const {
    if (server_timeout.count() >= static_cast<long long>(wire::kForever)) return Clock::time_point::max();
    auto slack = std::max(Millis(2000), options.timeout / 10);
    return Clock::now() + std::max(server_timeout + slack, options.timeout);
  }

  void check_usable() const {
    if (!broken.empty()) throw StoreConnectionError(conn.name() + ": connection unusable after an earlier failure (" + broken + ")");
  }

  std::string describe(Op op, std::string_view key) const {
    std::string s = conn.name() + ": " + wire::op_name(op);
    if (!key.empty()) s += " '" + std::string(key.substr(0, 200)) + "'";
    return s;
  }

  // Raises the error carried by a non-OK reply.
  [[noreturn]] void raise(const StoreConnection::Reply& reply, Op op, std::string_view key) const {
    raise_reply_error(describe(op, key), reply.status, reply.payload);
  }

  // One request, one reply. `read` parses the OK payload.
  template <typename Fill, typename Read>
  auto call(Op op, std::string_view key, Millis server_timeout, Fill&& fill, Read&& read) {
    check_usable();
    out.clear();
    std::uint32_t id = encode(op, fill);
    try {
      auto deadline = reply_deadline(server_timeout);
      conn.send(out, deadline);
      for (;;) {
        StoreConnection::Reply reply = conn.receive(deadline);
        if (reply.id != id) continue;  // a late reply to a request whose caller already gave up
        if (reply.status != Status::kOk) raise(reply, op, key);
        wire::Reader r(reply.payload);
        return read(r);
      }
    } catch (const StoreConnectionError& e) {
      broken = e.what();
      throw;
    } catch (const StoreTimeout& e) {
      if (std::string_view(e.what()).find(": timed out: ") == std::string_view::npos) {
        broken = e.what();  // the server itself did not answer: the stream is out of step
        throw StoreTimeout(describe(op, key) + ": no reply within the deadline (server stalled or unreachable)");
      }
      throw;
    } catch (const wire::ProtocolError& e) {
      broken = e.what();
      throw StoreConnectionError(describe(op, key) + ": malformed reply: " + e.what());
    }
  }
  template <typename Fill>
  void call_void(Op op, std::string_view key, Millis server_timeout, Fill&& fill) {
    call(op, key, server_timeout, fill, [](wire::Reader&) { return 0; });
  }

  static void put_keys(wire::Writer& w, const std::vector<std::string>& keys) {
    w.u32(static_cast<std::uint32_t>(keys.size()));
    for (auto& k : keys) w.str(k);
  }
};

namespace {
void check_value(const std::string& name, std::string_view key, std::size_t size) {
  if (size > kMaxValueSize) {
    throw StoreRejected(static_cast<int>(Status::kValueTooLarge),
                        name + ": value for '" + std::string(key.substr(0, 200)) + "' of " + std::to_string(size) +
                            " bytes exceeds the limit of " + std::to_string(kMaxValueSize));
  }
}
}  // namespace

TcpStore::TcpStore(StoreEndpoint endpoint, StoreClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(endpoint), std::move(options))) {}
TcpStore::~TcpStore() = default;

const StoreEndpoint& TcpStore::endpoint() const { return impl_->endpoint; }
std::string TcpStore::local_address() const { return impl_->conn.local_address(); }
bool TcpStore::is_local() const { return impl_->conn.is_local(); }
std::size_t TcpStore::receive_buffer_bytes() const { return impl_->conn.buffer_bytes(); }
void TcpStore::interrupt() { impl_->conn.interrupt(); }

void TcpStore::set(std::string_view key, std::string_view value) {
  check_value(impl_->conn.name(), key, value.size());
  impl_->call_void(Op::kSet, key, Millis(0), [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  });
}

void TcpStore::set_ephemeral(std::string_view key, std::string_view value) {
  check_value(impl_->conn.name(), key, value.size());
  impl_->call_void(Op::kSetEphemeral, key, Millis(0), [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  });
}

std::string TcpStore::get(std::string_view key, Millis timeout) {
  auto t = Impl::to_wire_timeout(timeout);
  return impl_->call(
      Op::kGet, key, timeout,
      [&](wire::Writer& w) {
        w.str(key);
        w.u32(t);
      },
      [](wire::Reader& r) { return std::string(r.str()); });
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  return impl_->call(
      Op::kAdd, key, Millis(0),
      [&](wire::Writer& w) {
        w.str(key);
        w.i64(delta);
      },
      [](wire::Reader& r) { return r.i64(); });
}

std::string TcpStore::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  check_value(impl_->conn.name(), key, desired.size());
  return impl_->call(
      Op::kCompareSet, key, Millis(0),
      [&](wire::Writer& w) {
        w.str(key);
        w.str(expected);
        w.str(desired);
      },
      [](wire::Reader& r) { return std::string(r.str()); });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return impl_->call(
      Op::kCheck, keys.empty() ? "" : keys[0], Millis(0), [&](wire::Writer& w) { Impl::put_keys(w, keys); },
      [](wire::Reader& r) { return r.u8() != 0; });
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  auto t = Impl::to_wire_timeout(timeout);
  impl_->call_void(Op::kWait, keys.empty() ? "" : keys[0], timeout, [&](wire::Writer& w) {
    w.u32(t);
    Impl::put_keys(w, keys);
  });
}

bool TcpStore::remove(std::string_view key) {
  return impl_->call(
      Op::kDelete, key, Millis(0), [&](wire::Writer& w) { w.str(key); }, [](wire::Reader& r) { return r.u8() != 0; });
}

std::int64_t TcpStore::num_keys(std::string_view prefix) {
  return impl_->call(
      Op::kNumKeys, prefix, Millis(0), [&](wire::Writer& w) { w.str(prefix); }, [](wire::Reader& r) { return r.i64(); });
}

std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys, Millis timeout) {
  auto t = Impl::to_wire_timeout(timeout);
  return impl_->call(
      Op::kMultiGet, keys.empty() ? "" : keys[0], timeout,
      [&](wire::Writer& w) {
        w.u32(t);
        Impl::put_keys(w, keys);
      },
      [](wire::Reader& r) {
        std::uint32_t n = r.count(4);
        std::vector<std::string> values;
        values.reserve(n);
        for (std::uint32_t i = 0; i < n; ++i) values.emplace_back(r.str());
        return values;
      });
}

void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) throw std::invalid_argument("multi_set: " + std::to_string(keys.size()) + " keys but " + std::to_string(values.size()) + " values");
  for (std::size_t i = 0; i < keys.size(); ++i) check_value(impl_->conn.name(), keys[i], values[i].size());
  impl_->call_void(Op::kMultiSet, keys.empty() ? "" : keys[0], Millis(0), [&](wire::Writer& w) {
    w.u32(static_cast<std::uint32_t>(keys.size()));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      w.str(keys[i]);
      w.str(values[i]);
    }
  });
}

std::int64_t TcpStore::append(std::string_view key, std::string_view value) {
  check_value(impl_->conn.name(), key, value.size());
  return impl_->call(
      Op::kAppend, key, Millis(0),
      [&](wire::Writer& w) {
        w.str(key);
        w.str(value);
      },
      [](wire::Reader& r) { return r.i64(); });
}

std::vector<std::string> TcpStore::list_keys(std::string_view prefix, std::size_t limit) {
  auto lim = static_cast<std::uint32_t>(std::min<std::size_t>(limit, 0xFFFFFFFFu));
  return impl_->call(
      Op::kListKeys, prefix, Millis(0),
      [&](wire::Writer& w) {
        w.str(prefix);
        w.u32(lim);
      },
      [](wire::Reader& r) {
        std::uint32_t n = r.count(4);
        std::vector<std::string> keys;
        keys.reserve(n);
        for (std::uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
        return keys;
      });
}

std::optional<std::string> TcpStore::try_get(std::string_view key) {
  return impl_->call(
      Op::kTryGet, key, Millis(0), [&](wire::Writer& w) { w.str(key); },
      [](wire::Reader& r) -> std::optional<std::string> {
        bool found = r.u8() != 0;
        auto v = r.str();
        if (!found) return std::nullopt;
        return std::string(v);
      });
}

std::unique_ptr<StoreWatch> TcpStore::watch(std::string prefix, std::function<void(const StoreEvent&)> on_event,
                                            std::function<void(const std::string& reason)> on_lost) {
  return open_store_watch(impl_->endpoint, impl_->options, std::move(prefix), std::move(on_event), std::move(on_lost));
}

void TcpStore::ping() {
  impl_->call_void(Op::kPing, "", Millis(0), [](wire::Writer&) {});
}

// --- Pipeline -------------------------------------------------------------------------------

void TcpStore::Pipeline::set(std::string_view key, std::string_view value) {
  check_value(store_.impl_->conn.name(), key, value.size());
  store_.impl_->out.swap(out_);
  store_.impl_->encode(Op::kSet, [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  });
  store_.impl_->out.swap(out_);
  ops_.push_back(static_cast<std::uint8_t>(Op::kSet));
}

void TcpStore::Pipeline::get(std::string_view key, Millis timeout) {
  auto t = Impl::to_wire_timeout(timeout);
  store_.impl_->out.swap(out_);
  store_.impl_->encode(Op::kGet, [&](wire::Writer& w) {
    w.str(key);
    w.u32(t);
  });
  store_.impl_->out.swap(out_);
  ops_.push_back(static_cast<std::uint8_t>(Op::kGet));
}

void TcpStore::Pipeline::add(std::string_view key, std::int64_t delta) {
  store_.impl_->out.swap(out_);
  store_.impl_->encode(Op::kAdd, [&](wire::Writer& w) {
    w.str(key);
    w.i64(delta);
  });
  store_.impl_->out.swap(out_);
  ops_.push_back(static_cast<std::uint8_t>(Op::kAdd));
}

void TcpStore::Pipeline::remove(std::string_view key) {
  store_.impl_->out.swap(out_);
  store_.impl_->encode(Op::kDelete, [&](wire::Writer& w) { w.str(key); });
  store_.impl_->out.swap(out_);
  ops_.push_back(static_cast<std::uint8_t>(Op::kDelete));
}

std::vector<std::string> TcpStore::Pipeline::flush() {
  Impl& s = *store_.impl_;
  s.check_usable();
  std::vector<std::string> results(ops_.size());
  if (ops_.empty()) return results;
  std::uint32_t first = s.next_id - static_cast<std::uint32_t>(ops_.size());
  std::string first_error;
  std::size_t received = 0;
  try {
    auto deadline = s.reply_deadline(s.options.timeout);
    s.conn.send(out_, deadline);
    out_.clear();
    while (received < ops_.size()) {
      StoreConnection::Reply reply = s.conn.receive(deadline);
      std::uint32_t index = reply.id - first;
      if (index >= ops_.size()) continue;
      ++received;
      auto op = static_cast<Op>(ops_[index]);
      if (reply.status != Status::kOk) {
        if (first_error.empty()) {
          try {
            s.raise(reply, op, "");
          } catch (const StoreError& e) {
            first_error = e.what();
          }
        }
        continue;
      }
      wire::Reader r(reply.payload);
      if (op == Op::kGet) results[index] = std::string(r.str());
      else if (op == Op::kAdd) results[index] = std::to_string(r.i64());
      else if (op == Op::kDelete) results[index] = r.u8() != 0 ? "1" : "0";
    }
  } catch (const StoreError& e) {
    s.broken = e.what();
    throw;
  }
  ops_.clear();
  if (!first_error.empty()) throw StoreError(first_error);
  return results;
}

}  // namespace crun
