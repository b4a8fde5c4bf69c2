// agent/http_endpoint: the limits hold against real sockets (small limits, so the test is quick).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "agent/http_endpoint.h"

using namespace crun;
using namespace std::chrono_literals;

namespace {

// The endpoint on its own loop thread, as the agent runs it.
struct Server {
  explicit Server(HttpLimits limits) {
    endpoint = std::make_unique<HttpEndpoint>(io, "127.0.0.1", 0, [this](const std::string& path) {
      ++requests;
      HttpReply r;
      r.body = path == "/big" ? std::string(1 << 20, 'x') : "ok " + path + "\n";
      return r;
    }, limits);
    port = endpoint->port();
    thread = std::thread([this] { io.run(); });
  }
  ~Server() {
    std::promise<void> done;
    boost::asio::post(io, [&] {
      endpoint.reset();
      io.stop();
      done.set_value();
    });
    done.get_future().wait();
    thread.join();
  }
  template <typename F>
  auto on_loop(F f) {
    std::promise<decltype(f())> p;
    boost::asio::post(io, [&] { p.set_value(f()); });
    return p.get_future().get();
  }
  boost::asio::io_context io;
  std::unique_ptr<HttpEndpoint> endpoint;
  std::uint16_t port = 0;
  int requests = 0;  // on the loop
  std::thread thread;
};

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: what it answered is still readable
    off += static_cast<std::size_t>(n);
  }
}

// Everything until the server closes (or `until` appears).
std::string read_all(int fd, const std::string& until = "") {
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

std::string round_trip(std::uint16_t port, const std::string& request) {
  const int fd = connect_to(port);
  send_all(fd, request);
  std::string out = read_all(fd);
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("http endpoint: GET, HEAD, keep-alive; other methods and bad requests are answered and closed", "[http_endpoint]") {
  Server s({});
  CHECK_THAT(round_trip(s.port, "GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200 OK") && Catch::EndsWith("\r\n\r\nok /healthz\n"));
  const std::string head = round_trip(s.port, "HEAD /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  CHECK_THAT(head, Catch::Contains("Content-Length: 12\r\n") && Catch::EndsWith("\r\n\r\n"));
  // Two requests on one connection.
  const int fd = connect_to(s.port);
  send_all(fd, "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n");
  CHECK_THAT(read_all(fd, "ok /b\n"), Catch::Contains("ok /a\n") && Catch::Contains("ok /b\n"));
  ::close(fd);
  CHECK_THAT(round_trip(s.port, "DELETE / HTTP/1.1\r\nHost: a\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 405") && Catch::Contains("Allow: GET, HEAD"));
  CHECK_THAT(round_trip(s.port, "\x16\x03\x01 not http at all\r\n\r\n"), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(round_trip(s.port, "GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"), Catch::StartsWith("HTTP/1.1 413"));
  CHECK(s.on_loop([&] { return s.requests; }) == 4);
}

TEST_CASE("http endpoint: a header past the limit gets 431; 10 MB of it costs nothing more", "[http_endpoint]") {
  HttpLimits l;
  l.header_bytes = 4096;
  Server s(l);
  CHECK_THAT(round_trip(s.port, "GET / HTTP/1.1\r\nX: " + std::string(5000, 'a') + "\r\n\r\n"), Catch::StartsWith("HTTP/1.1 431"));
  const std::string answer = round_trip(s.port, "GET / HTTP/1.1\r\nX: " + std::string(10 << 20, 'a') + "\r\n\r\n");
  CHECK((answer.empty() || answer.rfind("HTTP/1.1 431", 0) == 0));
  CHECK_THAT(round_trip(s.port, "GET /after HTTP/1.1\r\nConnection: close\r\n\r\n"), Catch::Contains("ok /after"));
}

TEST_CASE("http endpoint: slow and idle clients are dropped at the request timeout", "[http_endpoint]") {
  HttpLimits l;
  l.request_timeout = 300ms;
  Server s(l);
  const int slow = connect_to(s.port);
  const auto started = std::chrono::steady_clock::now();
  send_all(slow, "GET /");  // and never the rest
  CHECK(read_all(slow).empty());  // closed without an answer
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took >= 250ms);
  CHECK(took < 5s);
  ::close(slow);
  // A keep-alive connection left idle after its answer is closed too.
  const int idle = connect_to(s.port);
  send_all(idle, "GET /x HTTP/1.1\r\n\r\n");
  const std::string answer = read_all(idle);  // the answer, then the close
  CHECK_THAT(answer, Catch::Contains("ok /x"));
  ::close(idle);
  CHECK(s.on_loop([&] { return s.endpoint->connections(); }) == 0);
}

// Waits (bounded) until the server holds `n` connections, `idle` of them with no request under way.
void wait_for_connections(Server& s, std::size_t n, std::size_t idle) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const auto counts = [&] { return s.on_loop([&] { return std::make_pair(s.endpoint->connections(), s.endpoint->idle()); }); };
  while (counts() != std::make_pair(n, idle) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  REQUIRE(counts() == std::make_pair(n, idle));
}

TEST_CASE("http endpoint: at the limit a new connection closes the longest idle one; a probe always gets through",
          "[http_endpoint]") {
  HttpLimits l;
  l.max_connections = 4;
  Server s(l);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(s.port));
    wait_for_connections(s, held.size(), held.size());  // accepted in this order
  }
  // A keep-alive connection that has had its answer is idle again.
  send_all(held[1], "GET /kept HTTP/1.1\r\n\r\n");
  CHECK_THAT(read_all(held[1], "ok /kept\n"), Catch::Contains("ok /kept"));
  CHECK_THAT(round_trip(s.port, "GET /probe HTTP/1.1\r\nConnection: close\r\n\r\n"), Catch::Contains("ok /probe"));
  CHECK(read_all(held[0]).empty());  // the longest idle: closed without a byte
  CHECK(s.on_loop([&] { return std::make_pair(s.endpoint->evicted(), s.endpoint->refused()); }) == std::make_pair<std::uint64_t, std::uint64_t>(1, 0));
  send_all(held[1], "GET /again HTTP/1.1\r\nConnection: close\r\n\r\n");  // idle since its answer, not the oldest
  CHECK_THAT(read_all(held[1]), Catch::Contains("ok /again"));
  for (int fd : held) ::close(fd);
}

TEST_CASE("http endpoint: at the limit with every connection inside a request, a new one is closed at once", "[http_endpoint]") {
  HttpLimits l;
  l.max_connections = 4;
  Server s(l);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(s.port));
    send_all(held.back(), "GET /part");  // a request under way
  }
  wait_for_connections(s, 4, 0);
  const int extra = connect_to(s.port);
  CHECK(read_all(extra).empty());  // closed without a byte
  ::close(extra);
  CHECK(s.on_loop([&] { return std::make_pair(s.endpoint->evicted(), s.endpoint->refused()); }) == std::make_pair<std::uint64_t, std::uint64_t>(0, 1));
  send_all(held[0], " HTTP/1.1\r\nConnection: close\r\n\r\n");
  CHECK_THAT(read_all(held[0]), Catch::Contains("ok /part"));
  for (int fd : held) ::close(fd);
}

TEST_CASE("http endpoint: a request target in absolute form is served by its path", "[http_endpoint]") {
  Server s({});
  const std::string host = "http://127.0.0.1:" + std::to_string(s.port);
  CHECK_THAT(round_trip(s.port, "GET " + host + "/healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200 OK") && Catch::EndsWith("ok /healthz\n"));
  CHECK_THAT(round_trip(s.port, "GET HTTP://LOCALHOST/metrics?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n"),
             Catch::EndsWith("ok /metrics\n"));
  CHECK_THAT(round_trip(s.port, "GET " + host + " HTTP/1.1\r\nConnection: close\r\n\r\n"), Catch::EndsWith("ok /\n"));
}

TEST_CASE("http endpoint: a taken port or a bad address is one line", "[http_endpoint]") {
  boost::asio::io_context io;
  HttpEndpoint first(io, "127.0.0.1", 0, [](const std::string&) { return HttpReply{}; });
  CHECK_THROWS_WITH(HttpEndpoint(io, "127.0.0.1", first.port(), [](const std::string&) { return HttpReply{}; }),
                    "cannot serve the health check on 127.0.0.1:" + std::to_string(first.port()) + ": Address already in use");
  CHECK_THROWS_WITH(HttpEndpoint(io, "localhost", 0, [](const std::string&) { return HttpReply{}; }),
                    "health check address 'localhost' is not an IP address");
}
