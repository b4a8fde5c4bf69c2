// `crun store-server` and `crun store ...` as real processes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "rendezvous/store_client.h"

extern char** environ;

namespace {
using namespace std::chrono_literals;

struct Child {
  pid_t pid = -1;
  int out = -1;  // stdout+stderr
  std::string text;

  static Child spawn(std::vector<std::string> args) {
    args.insert(args.begin(), CRUN_BINARY);
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    Child c;
    REQUIRE(posix_spawn(&c.pid, CRUN_BINARY, &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    c.out = fds[0];
    return c;
  }
  // Reads until `pred(text)` holds, EOF, or the bound passes.
  template <typename Pred>
  bool read_until(Pred pred, std::chrono::milliseconds bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    while (!pred(text)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      ssize_t n = read(out, buf, sizeof buf);
      if (n <= 0) return pred(text);
      text.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  int wait_exit() {
    read_until([](const std::string&) { return false; }, 10s);
    int status = 0;
    waitpid(pid, &status, 0);
    close(out);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(out);
    }
  }
};

std::pair<int, std::string> run(std::vector<std::string> args) {
  Child c = Child::spawn(std::move(args));
  int code = c.wait_exit();
  return {code, c.text};
}
}  // namespace

TEST_CASE("crun store-server prints its endpoint first and serves until SIGTERM", "[cli]") {
  Child server = Child::spawn({"store-server", "--host", "127.0.0.1", "--port", "0"});
  REQUIRE(server.read_until([](const std::string& t) { return t.find('\n') != std::string::npos; }, 10s));
  std::string first = server.text.substr(0, server.text.find('\n'));
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

  kill(server.pid, SIGTERM);
  CHECK(server.wait_exit() == 0);
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
