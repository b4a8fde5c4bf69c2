// The store's local socket (store/local_socket.h): crun's clients on the store's host come through
// it, a store on the wildcard address takes them too, local_socket = false turns it off, a name
// another user took first is never sent the hello (its token), and a stopped store leaves no
// listener. The tests of other users run as root (CI is root) and fork a child that drops to
// nobody (uid 65534).
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "store/local_socket.h"
#include "store/store_connection.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {

constexpr uid_t kNobody = 65534;

// Sockets this process holds (the server thread opens files of its own when it first runs).
std::size_t open_sockets() {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    if (std::filesystem::read_symlink(e.path(), ec).string().rfind("socket:", 0) == 0) ++n;
  return n;
}

// Whether a listener holds the abstract name (a connect there is accepted, or queued).
bool name_listened(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(fd >= 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path, name.data(), name.size());
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&un),
                            static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())) == 0;
  ::close(fd);
  return ok;
}

// A TCP port of 127.0.0.1 held (bound with SO_REUSEADDR, not listening) until the test's server
// binds it too: the name for it can be taken before the server starts.
struct HeldPort {
  HeldPort() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd); }
  int fd = -1;
  std::uint16_t port = 0;
};

// Reads one byte the child writes to `fd`, waiting at most 10 s; -1 when none came.
int read_report(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 10'000) != 1) return -1;
  unsigned char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : -1;
}

int wait_child(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("a client on the store's host comes through its local socket and tells its loopback address", "[local_socket]") {
  ServerFixture f;
  auto c = f.client();
  c->set("k", "v");
  CHECK(c->get("k", 1s) == "v");
  CHECK(c->local_address() == "127.0.0.1");
  CHECK(c->is_local());
  const auto stats = f.server.stats();
  CHECK(stats.connections_accepted == 1);
  CHECK(stats.local_connections_accepted == 1);
  StoreConnection direct(f.endpoint(), StoreClientOptions{});
  CHECK(direct.is_local());
  // A store on an address not of this host has no local socket: its clients come over TCP.
  CHECK(listen_local("192.0.2.1", f.server.port()) == -1);
  CHECK(listen_local("10.1.2.3", f.server.port()) == -1);
}

TEST_CASE("a store on a wildcard address takes its family's loopback and wildcard clients through its local socket", "[local_socket]") {
  for (const std::string host : {"0.0.0.0", "::"}) {
    INFO(host);
    const bool v6 = host == "::";
    StoreServerOptions o;
    o.host = host;
    StoreServer server(o);
    server.start();
    TcpStore loopback(StoreEndpoint{v6 ? "::1" : "127.0.0.1", server.port()});
    TcpStore wildcard(StoreEndpoint{host, server.port()});
    loopback.set("k", "v");
    CHECK(wildcard.get("k", 1s) == "v");
    CHECK(loopback.is_local());
    CHECK(wildcard.is_local());
    CHECK(loopback.local_address() == (v6 ? "::1" : "127.0.0.1"));
    CHECK(wildcard.local_address() == (v6 ? "::1" : "127.0.0.1"));
    CHECK(server.stats().local_connections_accepted == 2);
    if (v6) {  // the other family's loopback reaches a dual-stack listener over TCP
      TcpStore other(StoreEndpoint{"127.0.0.1", server.port()});
      CHECK(other.get("k", 1s) == "v");
      CHECK_FALSE(other.is_local());
    }
  }
}

TEST_CASE("a store on ::1 or 127.0.0.2 has a local socket too; the client tells the address TCP would", "[local_socket]") {
  // Also ::1 and :: written other ways: the store listens under the canonical text, which is the
  // name a client derives from the address it resolved.
  for (const std::string host : {"::1", "127.0.0.2", "0:0:0:0:0:0:0:1", "0::1", "0:0::0"}) {
    INFO(host);
    StoreServerOptions o;
    o.host = host;
    StoreServer server(o);
    server.start();
    TcpStore c(StoreEndpoint{host, server.port()});
    c.set("k", "v");
    CHECK(c.get("k", 1s) == "v");
    CHECK(c.is_local());
    const bool v6 = host.find(':') != std::string::npos;
    CHECK(c.local_address() == (v6 ? "::1" : "127.0.0.1"));  // the loopback route's source
    CHECK(server.stats().local_connections_accepted == 1);
  }
}

TEST_CASE("a store told local_socket = false is reached over TCP alone", "[local_socket]") {
  StoreServerOptions o;
  o.local_socket = false;
  ServerFixture f(o);
  CHECK_FALSE(name_listened(local_socket_name("127.0.0.1", f.server.port())));
  auto c = f.client();
  c->set("k", "v");
  CHECK(c->get("k", 1s) == "v");
  CHECK_FALSE(c->is_local());
  CHECK(c->local_address() == "127.0.0.1");
  CHECK(f.server.stats().connections_accepted == 1);
  CHECK(f.server.stats().local_connections_accepted == 0);
}

TEST_CASE("a client told local_socket = false connects over TCP", "[local_socket]") {
  ServerFixture f;
  StoreClientOptions o;
  o.local_socket = false;
  StoreConnection tcp(f.endpoint(), o);
  CHECK_FALSE(tcp.is_local());
  CHECK(tcp.local_address() == "127.0.0.1");
  CHECK(f.server.stats().local_connections_accepted == 0);
  CHECK(eventually([&] { return f.server.stats().open_connections == 1; }));
}

TEST_CASE("a stopped store leaves no local socket behind", "[local_socket]") {
  std::string name;
  {
    ServerFixture f;
    name = local_socket_name("127.0.0.1", f.server.port());
    CHECK(name_listened(name));
    f.server.stop();
    CHECK_FALSE(name_listened(name));
  }
  CHECK_FALSE(name_listened(name));
}

// Any local user can bind an abstract name first. A client that came to it would send the hello,
// and the hello carries the job's token: the listener's owner is checked before anything is sent.
TEST_CASE("a local socket another user took first is sent nothing: the client goes over TCP", "[local_socket]") {
  REQUIRE(::geteuid() == 0);  // the squatter is another user (CI is root)
  HeldPort held;
  const std::string name = local_socket_name("127.0.0.1", held.port);
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  const pid_t squatter = ::fork();
  REQUIRE(squatter >= 0);
  if (squatter == 0) {  // nobody: takes the name, reports, then counts what one connection sends
    ::close(report[0]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(3);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::memcpy(un.sun_path, name.data(), name.size());
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&un),
               static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())) != 0 ||
        ::listen(fd, 8) != 0)
      ::_exit(4);
    unsigned char ready = 'r';
    if (::write(report[1], &ready, 1) != 1) ::_exit(5);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) ::_exit(6);  // nobody came
    const int conn = ::accept(fd, nullptr, nullptr);
    unsigned char got = 0;
    char buf[256];
    for (ssize_t n; (n = ::read(conn, buf, sizeof buf)) > 0;) got = static_cast<unsigned char>(std::min<ssize_t>(255, got + n));
    if (::write(report[1], &got, 1) != 1) ::_exit(7);
    ::_exit(0);
  }
  ::close(report[1]);
  REQUIRE(read_report(report[0]) == 'r');

  StoreServerOptions o;
  o.port = held.port;
  o.token = "the job's secret";
  StoreServer server(o);
  server.start();
  const std::size_t sockets = open_sockets();
  StoreClientOptions co;
  co.token = o.token;
  {
    TcpStore c(StoreEndpoint{"127.0.0.1", held.port}, co);
    c.set("k", "v");
    CHECK(c.get("k", 1s) == "v");
    CHECK(c.local_address() == "127.0.0.1");
  }
  CHECK(read_report(report[0]) == 0);  // the squatter was connected to, and sent not one byte
  CHECK(wait_child(squatter) == 0);
  CHECK(server.stats().local_connections_accepted == 0);
  CHECK(server.stats().connections_accepted == 1);
  // The refused attempt's socket was closed (the server closes its end when it reads the close).
  CHECK(eventually([&] { return open_sockets() == sockets; }));
  ::close(report[0]);
}

// Root's store, another user's client (a worker dropped to a user): the listener's owner is root,
// which every user trusts.
TEST_CASE("a client of another user is served through root's local socket", "[local_socket]") {
  REQUIRE(::geteuid() == 0);
  ServerFixture f;
  const StoreEndpoint endpoint = f.endpoint();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(3);
    try {
      StoreConnection c(endpoint, StoreClientOptions{});
      ::_exit(c.is_local() ? 0 : 4);
    } catch (...) {
      ::_exit(5);
    }
  }
  CHECK(wait_child(child) == 0);
  CHECK(f.server.stats().local_connections_accepted == 1);
}

// A server at its limit answers "full" and closes at once; over the local socket the client's
// hello then often meets a closed socket (EPIPE). The answer is still there to be read, and it is
// the error the client reports, not the broken pipe.
TEST_CASE("a client refused at the connection limit is told so however soon the server closed", "[local_socket]") {
  StoreServerOptions o;
  o.max_connections = 1;
  std::atomic<int> refusals{0};
  o.log = [&](const std::string& line) {
    if (line.find("refused a connection") != std::string::npos) ++refusals;
  };
  ServerFixture f(o);
  auto first = f.client();
  StoreClientOptions quick;
  quick.connect_timeout = 2s;
  int rejected = 0;
  for (int i = 0; i < 200; ++i) {
    try {
      TcpStore refused(f.endpoint(), quick);
      FAIL("a second connection must be refused");
    } catch (const StoreRejected& e) {
      ++rejected;
      CHECK_THAT(e.what(), Catch::Contains("connection limit"));
    } catch (const StoreError& e) {
      FAIL_CHECK("refused with " << e.what());
    }
  }
  CHECK(rejected == 200);
  CHECK(refusals.load() >= 1);  // logged, throttled
}
