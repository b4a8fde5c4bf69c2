// `crun store-server` and `crun store ...` as real processes.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>

#include "store/store_client.h"
#include "tests/support/store_fixture.h"
#include "tests/support/child_process.h"

extern char** environ;

using crun::test::ChildProcess;
using namespace std::chrono_literals;

namespace {
std::pair<int, std::string> run(std::vector<std::string> args) {
  args.insert(args.begin(), CRUN_BINARY);
  ChildProcess p(args);
  auto code = p.wait_exit(30s);
  REQUIRE(code.has_value());
  return {*code, p.out() + p.err()};
}
}  // namespace

TEST_CASE("crun store-server prints its endpoint first and serves until SIGTERM", "[cli]") {
  ChildProcess server({CRUN_BINARY, "store-server", "--host", "127.0.0.1", "--port", "0"});
  REQUIRE(server.wait_until([](const std::string& out, const std::string&) { return out.find('\n') != std::string::npos; },
                            10s));
  std::string first = server.out().substr(0, server.out().find('\n'));
  auto endpoint = crun::StoreEndpoint::parse(first);
  CHECK(endpoint.host == "127.0.0.1");
  CHECK(endpoint.port != 0);

  CHECK(run({"store", "--endpoint", first, "set", "greeting", "hello"}).first == 0);
  CHECK(run({"store", "--endpoint", first, "get", "greeting"}) == std::pair<int, std::string>{0, "hello\n"});
  CHECK(run({"store", "--endpoint", first, "add", "n", "41"}) == std::pair<int, std::string>{0, "41\n"});
  CHECK(run({"store", "--endpoint", first, "keys"}) == std::pair<int, std::string>{0, "greeting\nn\n"});
  auto [code, text] = run({"store", "--endpoint", first, "--timeout", "0.2", "get", "missing"});
  CHECK(code == 1);
  CHECK_THAT(text, Catch::Contains("missing") && Catch::Contains("timed out"));

  server.signal(SIGTERM);
  CHECK(server.wait_exit(10s) == 0);
}

TEST_CASE("store commands reject bad usage with exit 2 and one line", "[cli]") {
  auto [c1, t1] = run({"store-server", "--port", "notaport"});
  CHECK(c1 == 2);
  CHECK_THAT(t1, Catch::Contains("--port"));
  auto [c2, t2] = run({"store", "--endpoint", "nocolon", "get", "k"});
  CHECK(c2 == 2);
  CHECK_THAT(t2, Catch::Contains("nocolon"));
  CHECK(std::count(t2.begin(), t2.end(), '\n') == 1);
  auto [c3, t3] = run({"store", "get", "k"});
  CHECK(c3 == 2);
  CHECK_THAT(t3, Catch::Contains("--endpoint"));
  auto [c4, t4] = run({"store-server", "--host", "not-an-ip", "--port", "0"});
  CHECK(c4 == 1);
  CHECK_THAT(t4, Catch::Contains("not-an-ip"));
}

// Defect: every dropped connection was logged synchronously to stdout on the store's event-loop
// thread; with stdout a pipe nobody drained, a few hundred bad connections filled it and the
// server blocked in write(): it stopped answering everyone and ignored SIGTERM.
TEST_CASE("a store whose output nobody reads keeps serving through a flood of bad connections", "[cli][defect]") {
  int out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<std::string> args{CRUN_BINARY, "store-server", "--host", "127.0.0.1", "--port", "0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, CRUN_BINARY, &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  struct Reaper {  // a failed check must not leave the server behind
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  ::close(out[1]);
  ::close(err[1]);
  std::string first;  // the endpoint line; after it, neither pipe is read until the end
  char ch;
  while (first.find('\n') == std::string::npos && ::read(out[0], &ch, 1) == 1) first += ch;
  auto endpoint = crun::StoreEndpoint::parse(first.substr(0, first.find('\n')));

  for (int i = 0; i < 1000; ++i) {  // each one is dropped with a reason worth a log line
    crun::test::RawSocket garbage(endpoint.port);
    garbage.send("GET / HTTP/1.1\r\n\r\n");
    REQUIRE(garbage.closed_by_peer_within(5s));
  }
  crun::TcpStore client(endpoint);
  client.set("still", "serving");
  CHECK(client.get("still", 1s) == "serving");

  ::kill(pid, SIGTERM);
  REQUIRE(crun::test::wait_pid_gone(pid, 10s));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  reaper.pid = 0;  // reaped
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  std::string logged;
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  char buf[4096];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) logged.append(buf, static_cast<std::size_t>(n));
  INFO(logged);
  CHECK(crun::test::count(logged, "dropped connection") >= 1);
  CHECK(crun::test::count(logged, "dropped connection") <= 5);  // rate-limited, not one per connection
  ::close(out[0]);
  ::close(err[0]);
}
