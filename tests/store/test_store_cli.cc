// `crun store-server` and `crun store ...` as real processes.
#include <catch2/catch.hpp>
#include <csignal>

#include "rendezvous/store_client.h"
#include "tests/agent/child_process.h"

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
