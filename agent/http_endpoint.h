// HttpEndpoint: a small HTTP/1.1 server on the agent's own event loop, for operators' probes,
// scrapers and browsers (what it serves: agent/operator_view.h).
//
// Contract
//   - The constructor listens on address:port (port 0: one the kernel picks; port() tells) or
//     throws std::runtime_error with one line naming the address and why.
//   - GET and HEAD only (anything else: 405); the answer is the handler's for the request's path
//     (the query string is not passed on). Keep-alive as the client asks.
//   - The request's target in origin form ("/healthz?x=1") or absolute form
//     ("http://host:port/healthz"); the handler gets its path.
//   - Bounded, whatever the client does: at most `max_connections` at once. One more closes the
//     connection idle the longest (waiting for a request of which no byte has come: a fresh one
//     or a keep-alive one between requests; counted in evicted()), so idle connections never lock
//     out a probe; when none is idle it is accepted and closed at once (refused()). A request's header at most `header_bytes` (431)
//     and no body (413); a request must arrive whole, and its answer be taken, within
//     `request_timeout`, else the connection is closed (slowloris, idle keep-alives, readers that
//     never read); bytes that are not HTTP get 400 and a close. Memory per connection: the
//     header buffer and the answer being written.
//   - Nothing blocks: every socket operation is asynchronous on `io`.
//   - The destructor closes the listener and every connection.
//
// Threading
//   Constructed, used and destroyed on the thread that runs `io` (the agent's event loop); the
//   handler runs there too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace crun {

struct HttpReply {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpReply(const std::string& path)>;

struct HttpLimits {
  std::size_t max_connections = 64;
  std::size_t header_bytes = 8192;
  std::chrono::milliseconds request_timeout{10000};
};

class HttpEndpoint {
 public:
  HttpEndpoint(boost::asio::io_context& io, const std::string& address, std::uint16_t port, HttpHandler handler,
               HttpLimits limits = {});
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  std::uint16_t port() const;
  std::size_t connections() const;
  std::uint64_t refused() const;
  std::uint64_t evicted() const;
  std::size_t idle() const;  // connections waiting for a request of which no byte has come

  struct State;  // the listener and its connections (http_endpoint.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace crun
