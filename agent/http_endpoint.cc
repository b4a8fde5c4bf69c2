#include "agent/http_endpoint.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <stdexcept>
#include <unordered_set>

#include "base/accept_connection.h"

namespace crun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {
class Session;
}

struct HttpEndpoint::State : std::enable_shared_from_this<HttpEndpoint::State> {
  State(asio::io_context& io, HttpHandler h, HttpLimits l) : acceptor(io), retry(io), handler(std::move(h)), limits(l) {}
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // after EMFILE
  HttpHandler handler;
  HttpLimits limits;
  std::unordered_set<Session*> sessions;  // live connections (each owned by its pending operations)
  std::uint64_t refused = 0;
  std::uint64_t evicted = 0;
  bool closed = false;

  void accept();
  bool make_room();
};

namespace {

const char* reason_text(unsigned status) {
  switch (status) {
    case 400: return "bad request";
    case 405: return "only GET and HEAD";
    case 413: return "a request has no body here";
    case 431: return "request header too large";
    default: return "";
  }
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpEndpoint::State> owner)
      : stream_(std::move(socket)), buffer_(owner->limits.header_bytes), owner_(owner) {
    owner->sessions.insert(this);
  }
  ~Session() { forget(); }

  void start() { read(); }
  // Closes the socket; the connection no longer counts against the limit from now on, though its
  // pending operations still end (aborted) on the loop.
  void close() {
    forget();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }
  // Waiting for a request of which no byte has come (a fresh connection, or a keep-alive one
  // between requests): one that may be closed to make room without losing anyone's request.
  bool idle() const { return waiting_ && buffer_.size() == 0 && !(parser_ && parser_->got_some()); }
  std::chrono::steady_clock::time_point idle_since() const { return idle_since_; }

 private:
  void read() {
    auto owner = owner_.lock();
    if (!owner || owner->closed) return;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(owner->limits.header_bytes));
    parser_->body_limit(0);
    stream_.expires_after(owner->limits.request_timeout);
    waiting_ = true;
    idle_since_ = std::chrono::steady_clock::now();
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void forget() {
    if (auto owner = owner_.lock()) owner->sessions.erase(this);
  }

  void on_read(beast::error_code ec) {
    waiting_ = false;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof) {
      return close();
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) return answer_error(431);
    if (ec == http::error::body_limit) return answer_error(413);
    if (ec) return answer_error(400);
    const auto& req = parser_->get();
    const bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) return answer_error(405);
    auto owner = owner_.lock();
    if (!owner) return close();
    respond(owner->handler(path_of(req.target())), req.version(), req.keep_alive(), head);
  }

  // The path a request names: its origin form ("/healthz?x=1") or its absolute form
  // ("http://host:port/healthz", which HTTP/1.1 servers accept), without the query.
  static std::string path_of(std::string_view target) {
    for (std::string_view scheme : {"http://", "https://"}) {
      if (target.size() >= scheme.size() && beast::iequals(target.substr(0, scheme.size()), scheme)) {
        const auto slash = target.find('/', scheme.size());
        target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
        break;
      }
    }
    std::string path(target.substr(0, target.find('?')));
    return path;
  }

  // A request crun does not serve: its status and reason, then the connection is closed.
  void answer_error(unsigned status) {
    HttpReply reply;
    reply.status = status;
    reply.body = std::string(reason_text(status)) + "\n";
    respond(std::move(reply), 11, false, false);
  }

  void respond(HttpReply reply, unsigned version, bool keep_alive, bool head) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), version);
    res->set(http::field::server, "crun");
    res->set(http::field::content_type, reply.content_type);
    res->set(http::field::cache_control, "no-store");
    if (reply.status == 405) res->set(http::field::allow, "GET, HEAD");
    res->keep_alive(keep_alive);
    res->body() = std::move(reply.body);
    res->prepare_payload();
    if (head) res->body().clear();  // Content-Length stays the GET's
    write(std::move(res));
  }

  void write(std::shared_ptr<http::response<http::string_body>> res) {
    auto owner = owner_.lock();
    if (!owner) return close();
    stream_.expires_after(owner->limits.request_timeout);
    const bool keep = res->keep_alive();
    http::async_write(stream_, *res, [self = shared_from_this(), res, keep](beast::error_code ec, std::size_t) {
      if (ec || !keep) return self->close();
      self->read();
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  std::weak_ptr<HttpEndpoint::State> owner_;
  bool waiting_ = false;  // a read of the next request is pending
  std::chrono::steady_clock::time_point idle_since_;
};

}  // namespace

void HttpEndpoint::State::accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [self = shared_from_this()](beast::error_code ec) {
    if (self->closed || ec == asio::error::operation_aborted) return;
    // Each connection close-on-exec from accept4 on: no worker may inherit one.
    for (int i = 0; i < 64; ++i) {
      const AcceptedConnection accepted = accept_connection(self->acceptor.native_handle());
      if (accepted.outcome == AcceptedConnection::kOutOfDescriptors) {
        // Try again a little later rather than spin on a readable listener.
        self->retry.expires_after(std::chrono::milliseconds(100));
        self->retry.async_wait([self](beast::error_code e) {
          if (!e && !self->closed) self->accept();
        });
        return;
      }
      if (accepted.outcome == AcceptedConnection::kNoneLeft) break;
      const int fd = accepted.fd;
      if (self->sessions.size() >= self->limits.max_connections && !self->make_room()) {
        ++self->refused;  // closed at once: the limit bounds descriptors and memory
        ::close(fd);
        continue;
      }
      tcp::socket socket(self->acceptor.get_executor());
      beast::error_code aec;
      socket.assign(self->acceptor.local_endpoint().protocol(), fd, aec);
      if (aec) {
        ::close(fd);
        continue;
      }
      socket.set_option(tcp::no_delay(true), aec);
      std::make_shared<Session>(std::move(socket), self)->start();
    }
    self->accept();
  });
}

// At the limit, the connection idle the longest is closed for a new one: idle keep-alives
// (a browser's, a scraper's) must not lock out a liveness probe. Connections with a request under
// way are kept (they end at request_timeout); false when every one has.
bool HttpEndpoint::State::make_room() {
  Session* oldest = nullptr;
  for (Session* s : sessions) {
    if (s->idle() && (oldest == nullptr || s->idle_since() < oldest->idle_since())) oldest = s;
  }
  if (oldest == nullptr) return false;
  ++evicted;
  oldest->close();
  return true;
}

HttpEndpoint::HttpEndpoint(asio::io_context& io, const std::string& address, std::uint16_t port, HttpHandler handler,
                           HttpLimits limits)
    : state_(std::make_shared<State>(io, std::move(handler), limits)) {
  const std::string where = (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(port);
  beast::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) throw std::runtime_error("health check address '" + address + "' is not an IP address");
  const tcp::endpoint ep(ip, port);
  auto& a = state_->acceptor;
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error("cannot serve the health check on " + where + ": " + std::strerror(errno));
  a.assign(ep.protocol(), fd, ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot serve the health check on " + where + ": " + ec.message());
  state_->accept();
}

HttpEndpoint::~HttpEndpoint() {
  state_->closed = true;
  beast::error_code ignored;
  state_->acceptor.close(ignored);
  state_->retry.cancel();
  for (Session* s : std::unordered_set<Session*>(state_->sessions)) s->close();
}

std::uint16_t HttpEndpoint::port() const { return state_->acceptor.local_endpoint().port(); }
std::size_t HttpEndpoint::connections() const { return state_->sessions.size(); }
std::uint64_t HttpEndpoint::refused() const { return state_->refused; }
std::uint64_t HttpEndpoint::evicted() const { return state_->evicted; }
std::size_t HttpEndpoint::idle() const {
  std::size_t n = 0;
  for (const Session* s : state_->sessions) n += s->idle() ? 1 : 0;
  return n;
}

}  // namespace crun
