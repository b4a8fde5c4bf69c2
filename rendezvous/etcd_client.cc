#include "rendezvous/etcd_client.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "rendezvous/tls_library.h"

namespace crun {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::awaitable;
using asio::use_awaitable;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxBody = 16u << 20;
constexpr std::size_t kMaxWatchMessage = 16u << 20;

std::string b64(const std::string& s) {
  std::string out(beast::detail::base64::encoded_size(s.size()), '\0');
  out.resize(beast::detail::base64::encode(out.data(), s.data(), s.size()));
  return out;
}

std::string unb64(const std::string& s) {
  std::size_t data = s.size();  // the decoder stops at the padding: everything before it must be read
  for (int i = 0; i < 2 && data > 0 && s[data - 1] == '='; ++i) --data;
  std::string out(beast::detail::base64::decoded_size(s.size()), '\0');
  const auto [written, read] = beast::detail::base64::decode(out.data(), s.data(), s.size());
  if (read != data || s.size() % 4 != 0) throw std::invalid_argument("etcd sent a key or value that is not base64");
  out.resize(written);
  return out;
}

// int64 fields come as JSON strings (proto3's mapping); absent means 0.
std::int64_t i64(const json& j, const char* field) {
  const auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  if (it->is_number_integer()) return it->get<std::int64_t>();
  throw std::invalid_argument(std::string("etcd sent a non-integer ") + field);
}

std::string text(const json& j, const char* field) {
  const auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

EtcdKeyValue kv_of(const json& j) {
  EtcdKeyValue kv;
  kv.key = unb64(text(j, "key"));
  kv.value = unb64(text(j, "value"));
  kv.create_revision = i64(j, "create_revision");
  kv.mod_revision = i64(j, "mod_revision");
  kv.lease = i64(j, "lease");
  return kv;
}

std::vector<EtcdKeyValue> kvs_of(const json& j) {
  std::vector<EtcdKeyValue> out;
  if (auto it = j.find("kvs"); it != j.end() && it->is_array()) {
    for (const auto& e : *it) out.push_back(kv_of(e));
  }
  return out;
}

json op_json(const EtcdOp& op) {
  json body = {{"key", b64(op.key)}};
  switch (op.kind) {
    case EtcdOp::Kind::kPut:
      body["value"] = b64(op.value);
      if (op.lease) body["lease"] = std::to_string(op.lease);
      return {{"request_put", body}};
    case EtcdOp::Kind::kDelete:
      if (!op.range_end.empty()) body["range_end"] = b64(op.range_end);
      return {{"request_delete_range", body}};
    case EtcdOp::Kind::kRange:
      if (!op.range_end.empty()) body["range_end"] = b64(op.range_end);
      if (op.count_only) body["count_only"] = true;
      if (op.keys_only) body["keys_only"] = true;
      return {{"request_range", body}};
  }
  return body;
}

json compare_json(const EtcdCompare& c) {
  json j = {{"key", b64(c.key)}, {"result", "EQUAL"}};
  switch (c.target) {
    case EtcdCompare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.revision);
      break;
    case EtcdCompare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.revision);
      break;
    case EtcdCompare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = b64(c.value);
      break;
  }
  return j;
}

// A failure of TLS itself (handshake, certificate, an alert from the member): no other member
// will think differently, so it is not retried. A connection cut mid-record is not one of them.
bool is_tls_failure(const boost::system::error_code& ec) { return ec.category() == asio::error::get_ssl_category(); }

bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// etcd's gRPC status code in `error` (0: none, or not an EtcdError).
int grpc_code(const std::exception_ptr& error) {
  if (!error) return 0;
  try {
    std::rethrow_exception(error);
  } catch (const EtcdError& e) {
    return e.code();
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::string EtcdEndpoint::str() const { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port); }

std::string etcd_prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// One HTTP/1.1 connection to the client's current member.
struct EtcdConnection {
  explicit EtcdConnection(EtcdClient::Impl& c) : client(c) {}
  ~EtcdConnection() { close(); }

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  bool open() const { return (plain || secure) && !shut; }
  // Closes the socket; an operation in flight ends with operation_aborted. The stream objects
  // stay until the next connect(), so that nothing in flight outlives what it works on.
  void close();
  awaitable<void> connect();
  awaitable<http::response<http::string_body>> exchange(const std::string& target, const std::string& body);
  // Sends a request whose response is a stream (a watch); the caller reads it.
  awaitable<void> send(const std::string& target, const std::string& body);

  EtcdClient::Impl& client;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer{kMaxBody};
  std::size_t endpoint = 0;
  std::uint64_t generation = 0;
  bool reused = false;  // carried a request before (the member may have closed it meanwhile)
  bool shut = false;
};

// A FIFO of requests over one connection.
struct EtcdChannel {
  explicit EtcdChannel(EtcdClient::Impl& c) : conn(c) {}
  EtcdConnection conn;
  std::deque<std::pair<std::string, std::string>> queue;  // target, body
  std::deque<std::function<void(std::exception_ptr, const json&)>> done;
  bool running = false;
};

struct EtcdWatch::State {
  std::weak_ptr<EtcdClient::Impl> client;
  std::string key, range_end;
  std::int64_t next_revision = 0;
  bool deletes_only = false;
  std::function<void(std::int64_t, std::vector<EtcdEvent>)> on_events;
  std::function<void(std::int64_t)> on_created;
  std::function<void(std::exception_ptr)> on_failed;
  bool cancelled = false;
  EtcdConnection* conn = nullptr;
  int move_listener = -1;
};

struct EtcdClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& i, EtcdClientOptions o) : io(i), opt(std::move(o)) {
    if (opt.endpoints.empty()) throw std::invalid_argument("no etcd endpoint given");
    current = opt.first_endpoint % opt.endpoints.size();
    if (!opt.tls) return;
    load_tls_library();  // a missing libssl: one line, before anything is tried
    tls.emplace(ssl::context::tls_client);
    tls->set_verify_mode(ssl::verify_peer);
    const auto load = [](const std::string& what, const std::string& path, auto&& f) {
      try {
        f();
      } catch (const boost::system::system_error& e) {
        throw std::runtime_error("cannot load the " + what + " " + path + ": " + e.code().message());
      }
    };
    if (opt.cacert.empty()) tls->set_default_verify_paths();
    else load("CA certificate", opt.cacert, [&] { tls->load_verify_file(opt.cacert); });
    if (!opt.cert.empty()) load("client certificate", opt.cert, [&] { tls->use_certificate_chain_file(opt.cert); });
    if (!opt.key.empty()) load("client key", opt.key, [&] { tls->use_private_key_file(opt.key, ssl::context::pem); });
  }

  // The member at `from` failed: every connection moves on to the next one.
  void move_on(std::size_t from) {
    if (from != current) return;
    current = (current + 1) % opt.endpoints.size();
    ++generation;
    auto listeners = move_listeners;  // a listener may unregister itself
    for (auto& [id, f] : listeners) f();
  }

  std::string endpoints_text() const {
    std::string out;
    for (const auto& e : opt.endpoints) out += (out.empty() ? "" : ", ") + e.str();
    return out;
  }

  void submit(EtcdChannel& ch, std::string target, std::string body, std::function<void(std::exception_ptr, const json&)> done);
  awaitable<void> drain(EtcdChannel& ch);
  // The reply, or throws EtcdError (also when the client closes meanwhile).
  awaitable<json> call(EtcdChannel& ch, const std::string& target, const std::string& body);
  awaitable<void> run_watch(std::shared_ptr<EtcdWatch::State> w);
  awaitable<void> backoff(int failures);

  asio::io_context& io;
  EtcdClientOptions opt;
  std::optional<ssl::context> tls;
  std::size_t current = 0;
  std::uint64_t generation = 0;
  bool closed = false;
  std::map<int, std::function<void()>> move_listeners;
  int next_listener = 0;
  EtcdChannel requests{*this};
  EtcdChannel leases{*this};
};

void EtcdConnection::close() {
  boost::system::error_code ignored;
  if (plain) plain->socket().close(ignored);
  if (secure) beast::get_lowest_layer(*secure).socket().close(ignored);
  shut = true;
  reused = false;
}

awaitable<void> EtcdConnection::connect() {
  close();
  plain.reset();
  secure.reset();
  buffer.clear();
  shut = false;
  endpoint = client.current;
  generation = client.generation;
  const EtcdEndpoint& ep = client.opt.endpoints[endpoint];
  tcp::resolver resolver(client.io);
  const auto results = co_await resolver.async_resolve(ep.host, std::to_string(ep.port), use_awaitable);
  if (results.empty()) throw boost::system::system_error(asio::error::host_not_found);
  const tcp::endpoint target = results.begin()->endpoint();
  // Opened close-on-exec, so that no exec elsewhere in the process inherits it.
  const int fd = ::socket(target.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw boost::system::system_error(boost::system::error_code(errno, boost::system::system_category()));
  if (client.tls) {
    secure = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(client.io, *client.tls);
  } else {
    plain = std::make_unique<beast::tcp_stream>(client.io);
  }
  lowest().socket().assign(target.protocol(), fd);
  lowest().expires_after(client.opt.attempt_timeout);
  co_await lowest().async_connect(target, use_awaitable);
  lowest().socket().set_option(tcp::no_delay(true));
  if (secure) {
    if (!is_ip_literal(ep.host)) SSL_set_tlsext_host_name(secure->native_handle(), ep.host.c_str());
    secure->set_verify_callback(ssl::host_name_verification(ep.host));
    co_await secure->async_handshake(ssl::stream_base::client, use_awaitable);
  }
}

awaitable<void> EtcdConnection::send(const std::string& target, const std::string& body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, client.opt.endpoints[endpoint].str());
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  lowest().expires_after(client.opt.attempt_timeout);
  if (secure) co_await http::async_write(*secure, req, use_awaitable);
  else co_await http::async_write(*plain, req, use_awaitable);
}

awaitable<http::response<http::string_body>> EtcdConnection::exchange(const std::string& target, const std::string& body) {
  co_await send(target, body);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBody);
  if (secure) co_await http::async_read(*secure, buffer, parser, use_awaitable);
  else co_await http::async_read(*plain, buffer, parser, use_awaitable);
  reused = true;
  co_return parser.release();
}

awaitable<void> EtcdClient::Impl::backoff(int failures) {
  // After each full turn over the members, wait a little before the next (at most 1 s).
  if (failures % static_cast<int>(opt.endpoints.size()) != 0) co_return;
  asio::steady_timer t(io);
  t.expires_after(std::chrono::milliseconds(std::min(1000, 100 * (failures / static_cast<int>(opt.endpoints.size())))));
  co_await t.async_wait(use_awaitable);
}

awaitable<json> EtcdClient::Impl::call(EtcdChannel& ch, const std::string& target, const std::string& body) {
  auto self = shared_from_this();
  const auto deadline = Clock::now() + opt.give_up_after;
  std::string last;
  int failures = 0;
  while (!closed) {
    EtcdConnection& c = ch.conn;
    std::size_t at = current;
    try {
      if (!c.open() || c.generation != generation) co_await c.connect();
      at = c.endpoint;
      const bool was_reused = c.reused;
      std::optional<http::response<http::string_body>> reply;
      try {
        reply = co_await c.exchange(target, body);
      } catch (const boost::system::system_error& e) {
        // A kept-alive connection the member closed meanwhile: once more, on a fresh one.
        if (!was_reused || closed || is_tls_failure(e.code())) throw;
      }
      if (!reply) {
        co_await c.connect();
        reply = co_await c.exchange(target, body);
      }
      const auto& res = *reply;
      json j = json::parse(res.body(), nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        throw EtcdError("etcd at " + opt.endpoints[at].str() + " answered " + target +
                        " with something that is not JSON (HTTP " + std::to_string(res.result_int()) + ")");
      }
      if (res.result() == http::status::ok && !j.contains("code")) co_return j;
      const int code = j.value("code", 0);
      std::string message = text(j, "message");
      if (message.empty()) message = "HTTP " + std::to_string(res.result_int());
      if (code == 16 || code == 7 || res.result() == http::status::unauthorized) {
        throw EtcdRejected("etcd at " + opt.endpoints[at].str() + " refused: " + message, code);
      }
      if (code != 14 && code != 4 && code != 13 && res.result_int() < 500) {
        throw EtcdError("etcd: " + message, code);
      }
      last = opt.endpoints[at].str() + ": " + message;  // unavailable, deadline, no leader: another member
    } catch (const boost::system::system_error& e) {
      if (closed) break;
      if (is_tls_failure(e.code())) {
        throw EtcdRejected("TLS with etcd at " + opt.endpoints[at].str() + " failed: " + e.code().message());
      }
      last = opt.endpoints[at].str() + ": " + (e.code() == beast::error::timeout ? "timed out" : e.code().message());
    }
    c.close();
    move_on(at);
    ++failures;
    if (Clock::now() >= deadline) {
      throw EtcdUnreachable("etcd unreachable at " + endpoints_text() + " (last error: " + last + ")");
    }
    co_await backoff(failures);
  }
  throw EtcdError("etcd client closed");
}

void EtcdClient::Impl::submit(EtcdChannel& ch, std::string target, std::string body,
                              std::function<void(std::exception_ptr, const json&)> done) {
  if (closed) return;
  ch.queue.emplace_back(std::move(target), std::move(body));
  ch.done.push_back(std::move(done));
  if (ch.running) return;
  ch.running = true;
  asio::co_spawn(io, drain(ch), asio::detached);
}

awaitable<void> EtcdClient::Impl::drain(EtcdChannel& ch) {
  auto self = shared_from_this();
  while (!ch.queue.empty() && !closed) {
    auto [target, body] = std::move(ch.queue.front());
    ch.queue.pop_front();
    std::exception_ptr error;
    json reply;
    try {
      reply = co_await call(ch, target, body);
    } catch (const EtcdError&) {
      error = std::current_exception();
    }
    auto done = std::move(ch.done.front());
    ch.done.pop_front();
    if (closed) break;
    try {
      done(error, reply);
    } catch (const std::exception& e) {
      // A reply we cannot read (a malformed field): the request failed.
      done(std::make_exception_ptr(EtcdError(std::string("etcd sent a malformed reply to ") + target + ": " + e.what())),
           json());
    }
  }
  ch.running = false;
}

// One watch stream's reading: the HTTP parser, the bytes of a message not yet complete, and the
// messages turned into events (plain code, out of the coroutine).
struct EtcdWatchStream {
  explicit EtcdWatchStream(EtcdWatch::State& s) : w(s) {
    parser.body_limit(boost::none);
    parser.on_chunk_body(on_body);
  }

  // Handles every complete message (one JSON object a line); sets `failed` when the watch ends.
  void drain() {
    for (std::size_t nl; !failed && (nl = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty()) handle(line);
    }
  }

  void handle(const std::string& line) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("a watch message that is not JSON");
    if (auto e = j.find("error"); e != j.end()) {
      const int code = e->is_object() ? e->value("grpc_code", e->value("code", 0)) : 0;
      const std::string message = e->is_object() ? e->value("message", std::string("error")) : e->dump();
      const std::string why = "etcd ended the watch: " + message;
      failed = code == 16 || code == 7 ? std::make_exception_ptr(EtcdRejected(why, code))
                                       : std::make_exception_ptr(EtcdError(why, code));
      return;
    }
    const json r = j.value("result", json::object());
    if (r.value("canceled", false)) {
      failed = std::make_exception_ptr(EtcdError("etcd cancelled the watch (history compacted up to revision " +
                                                 std::to_string(i64(r, "compact_revision")) + ")"));
      return;
    }
    if (r.value("created", false) && w.next_revision == 0) {  // a watch from now: resume after this revision
      const std::int64_t at = i64(r.value("header", json::object()), "revision");
      w.next_revision = at + 1;
      if (w.on_created && !w.cancelled) w.on_created(at);
    }
    std::vector<EtcdEvent> events;
    if (auto it = r.find("events"); it != r.end() && it->is_array()) {
      for (const auto& e : *it) {
        EtcdEvent ev;
        ev.deleted = text(e, "type") == "DELETE";
        ev.kv = kv_of(e.value("kv", json::object()));
        w.next_revision = std::max(w.next_revision, ev.kv.mod_revision + 1);
        events.push_back(std::move(ev));
      }
    }
    const std::int64_t revision = i64(r.value("header", json::object()), "revision");
    if (!events.empty() && !w.cancelled) w.on_events(revision, std::move(events));
    delivered = true;
  }

  EtcdWatch::State& w;
  std::string pending;
  std::exception_ptr failed;  // an EtcdError: the watch ended
  bool delivered = false;
  std::function<std::size_t(std::uint64_t, boost::string_view, boost::system::error_code&)> on_body =
      [this](std::uint64_t, boost::string_view data, boost::system::error_code& ec) -> std::size_t {
    if (pending.size() + data.size() > kMaxWatchMessage) {  // a message over 16 MiB: drop the stream
      ec = http::error::body_limit;
      return 0;
    }
    pending.append(data.data(), data.size());
    return data.size();
  };
  http::response_parser<http::empty_body> parser;
};

awaitable<void> EtcdClient::Impl::run_watch(std::shared_ptr<EtcdWatch::State> w) {
  auto self = shared_from_this();
  auto conn = std::make_unique<EtcdConnection>(*this);
  w->conn = conn.get();
  int failures = 0;
  while (!w->cancelled && !closed) {
    std::size_t at = current;
    std::exception_ptr failed;
    try {
      co_await conn->connect();
      at = conn->endpoint;
      json create = {{"key", b64(w->key)}};
      if (w->next_revision > 0) create["start_revision"] = std::to_string(w->next_revision);
      if (!w->range_end.empty()) create["range_end"] = b64(w->range_end);
      if (w->deletes_only) create["filters"] = json::array({"NOPUT"});
      // (GCC 12 cannot keep a string literal's temporary across a co_await: named strings.)
      const std::string target = "/v3/watch", body = json{{"create_request", create}}.dump();
      co_await conn->send(target, body);
      conn->lowest().expires_never();
      auto stream = std::make_unique<EtcdWatchStream>(*w);
      if (conn->secure) co_await http::async_read_header(*conn->secure, conn->buffer, stream->parser, use_awaitable);
      else co_await http::async_read_header(*conn->plain, conn->buffer, stream->parser, use_awaitable);
      const auto code = stream->parser.get().result();
      if (code == http::status::unauthorized || code == http::status::forbidden) {
        stream->failed = std::make_exception_ptr(EtcdRejected("etcd at " + opt.endpoints[at].str() + " refused the watch"));
      } else if (code != http::status::ok) {
        throw boost::system::system_error(asio::error::connection_refused);
      }
      while (!stream->failed && !w->cancelled && !stream->parser.is_done()) {
        if (conn->secure) co_await http::async_read_some(*conn->secure, conn->buffer, stream->parser, use_awaitable);
        else co_await http::async_read_some(*conn->plain, conn->buffer, stream->parser, use_awaitable);
        stream->drain();
        if (stream->delivered) failures = 0;
      }
      failed = stream->failed;
      if (!failed && !w->cancelled && !closed) throw boost::system::system_error(asio::error::eof);  // ended: another member
    } catch (const boost::system::system_error& e) {
      if (!w->cancelled && !closed) {
        if (is_tls_failure(e.code())) {
          failed = std::make_exception_ptr(
              EtcdRejected("TLS with etcd at " + opt.endpoints[at].str() + " failed: " + e.code().message()));
        } else if (e.code() != asio::error::operation_aborted && e.code() != asio::error::bad_descriptor) {
          move_on(at);  // (a failover elsewhere closed this connection: follow it, without blaming this member)
        }
      }
    } catch (const std::exception& e) {
      failed = std::make_exception_ptr(EtcdError(std::string("etcd's watch stream: ") + e.what()));
    }
    if (w->cancelled || closed) break;
    if (failed) {
      w->on_failed(failed);
      break;
    }
    conn->close();
    ++failures;
    co_await backoff(failures);
  }
  w->conn = nullptr;
  if (auto it = move_listeners.find(w->move_listener); it != move_listeners.end()) move_listeners.erase(it);
}

EtcdClient::EtcdClient(asio::io_context& io, EtcdClientOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

EtcdClient::~EtcdClient() { close(); }

void EtcdClient::close() {
  Impl& m = *impl_;
  if (m.closed) return;
  m.closed = true;
  m.requests.conn.close();
  m.leases.conn.close();
  auto listeners = m.move_listeners;
  for (auto& [id, f] : listeners) f();
}

std::string EtcdClient::endpoints_text() const { return impl_->endpoints_text(); }

std::string EtcdClient::local_address() const {
  EtcdConnection& c = impl_->requests.conn;
  if (!c.open()) return {};
  boost::system::error_code ec;
  const auto ep = c.lowest().socket().local_endpoint(ec);
  return ec ? std::string() : ep.address().to_string();
}

void EtcdClient::range(std::string key, std::string range_end, Callback<EtcdRangeResult> done, bool serializable) {
  json body = {{"key", b64(key)}};
  if (serializable) body["serializable"] = true;
  if (!range_end.empty()) body["range_end"] = b64(range_end);
  impl_->submit(impl_->requests, "/v3/kv/range", body.dump(), [done = std::move(done)](std::exception_ptr error, const json& j) {
    EtcdRangeResult r;
    if (!error) {
      r.revision = i64(j.value("header", json::object()), "revision");
      r.kvs = kvs_of(j);
    }
    done(error, std::move(r));
  });
}

void EtcdClient::txn(EtcdTxn t, Callback<EtcdTxnResult> done) {
  json body = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : t.compare) body["compare"].push_back(compare_json(c));
  for (const auto& op : t.success) body["success"].push_back(op_json(op));
  for (const auto& op : t.failure) body["failure"].push_back(op_json(op));
  impl_->submit(impl_->requests, "/v3/kv/txn", body.dump(), [done = std::move(done)](std::exception_ptr error, const json& j) {
    EtcdTxnResult r;
    if (!error) {
      r.succeeded = j.value("succeeded", false);
      r.revision = i64(j.value("header", json::object()), "revision");
      if (auto it = j.find("responses"); it != j.end() && it->is_array()) {
        for (const auto& resp : *it) {
          if (auto range = resp.find("response_range"); range != resp.end()) {
            auto kvs = kvs_of(*range);
            r.kvs.insert(r.kvs.end(), kvs.begin(), kvs.end());
            r.counts.push_back(i64(*range, "count"));
          }
        }
      }
    }
    done(error, std::move(r));
  });
}

void EtcdClient::grant(std::int64_t ttl_seconds, Callback<EtcdLease> done) {
  json body = {{"TTL", std::to_string(ttl_seconds)}};
  impl_->submit(impl_->leases, "/v3/lease/grant", body.dump(), [done = std::move(done)](std::exception_ptr error, const json& j) {
    EtcdLease l;
    if (!error) {
      if (!text(j, "error").empty()) {
        done(std::make_exception_ptr(EtcdError("etcd refused a lease: " + text(j, "error"))), l);
        return;
      }
      l.id = i64(j, "ID");
      l.ttl_seconds = i64(j, "TTL");
    }
    done(error, l);
  });
}

void EtcdClient::keep_alive(std::int64_t lease, Callback<EtcdLease> done) {
  json body = {{"ID", std::to_string(lease)}};
  impl_->submit(impl_->leases, "/v3/lease/keepalive", body.dump(), [done = std::move(done)](std::exception_ptr error, const json& j) {
    EtcdLease l;
    if (!error) {
      const json& r = j.value("result", json::object());
      l.id = i64(r, "ID");
      l.ttl_seconds = i64(r, "TTL");
    } else if (grpc_code(error) == 5) {  // the lease is gone
      done(nullptr, l);
      return;
    }
    done(error, l);
  });
}

void EtcdClient::revoke(std::int64_t lease, Callback<bool> done) {
  json body = {{"ID", std::to_string(lease)}};
  impl_->submit(impl_->leases, "/v3/lease/revoke", body.dump(), [done = std::move(done)](std::exception_ptr error, const json&) {
    if (grpc_code(error) == 5) done(nullptr, false);  // already gone
    else done(error, !error);
  });
}

std::unique_ptr<EtcdWatch> EtcdClient::watch(std::string key, std::string range_end, std::int64_t start_revision,
                                             bool deletes_only,
                                             std::function<void(std::int64_t, std::vector<EtcdEvent>)> on_events,
                                             std::function<void(std::exception_ptr)> on_failed,
                                             std::function<void(std::int64_t)> on_created) {
  auto st = std::make_shared<EtcdWatch::State>();
  st->client = impl_;
  st->key = std::move(key);
  st->range_end = std::move(range_end);
  st->next_revision = start_revision;
  st->deletes_only = deletes_only;
  st->on_events = std::move(on_events);
  st->on_failed = std::move(on_failed);
  st->on_created = std::move(on_created);
  Impl& m = *impl_;
  st->move_listener = m.next_listener++;
  // When the client moves to another member, the watch follows.
  m.move_listeners[st->move_listener] = [weak = std::weak_ptr<EtcdWatch::State>(st), &m] {
    auto s = weak.lock();
    if (s && s->conn && (m.closed || s->conn->endpoint != m.current) && s->conn->open()) s->conn->close();
  };
  asio::co_spawn(m.io, m.run_watch(st), asio::detached);
  return std::make_unique<EtcdWatch>(st);
}

EtcdWatch::EtcdWatch(std::shared_ptr<State> state) : state_(std::move(state)) {}
EtcdWatch::~EtcdWatch() { cancel(); }

void EtcdWatch::cancel() {
  if (state_->cancelled) return;
  state_->cancelled = true;
  if (auto c = state_->client.lock()) c->move_listeners.erase(state_->move_listener);
  if (state_->conn) state_->conn->close();
}

}  // namespace crun
