// `crun status`'s arguments (CLI11): what parses, and one line naming what does not.
#include <catch2/catch.hpp>

#include "launcher/status_command.h"

using crun::parse_status_arguments;
using crun::StatusUsageError;
using namespace std::chrono_literals;

namespace {

// The one-line error for `args`.
std::string refused(const std::vector<std::string>& args) {
  try {
    parse_status_arguments(args);
  } catch (const StatusUsageError& e) {
    const std::string why = e.what();
    CHECK(why.find('\n') == std::string::npos);
    CHECK_FALSE(why.empty());
    return why;
  }
  FAIL("accepted: " << Catch::Detail::stringify(args));
  return {};
}

}  // namespace

TEST_CASE("crun status takes one URL, --json and --timeout in any order", "[status]") {
  const auto plain = parse_status_arguments({"http://node0:29400/"});
  CHECK(plain.url == "http://node0:29400/");
  CHECK(plain.host == "node0");
  CHECK(plain.port == 29400);
  CHECK_FALSE(plain.as_json);
  CHECK(plain.timeout == 5s);
  CHECK_FALSE(plain.help);

  const auto all = parse_status_arguments({"--timeout", "0.25", "[::1]:8080", "--json"});
  CHECK(all.host == "::1");
  CHECK(all.port == 8080);
  CHECK(all.as_json);
  CHECK(all.timeout == 250ms);
  CHECK(parse_status_arguments({"127.0.0.1:1", "--timeout=3600"}).timeout == 3600s);
  CHECK_FALSE(all.stacks);
  CHECK(parse_status_arguments({"--stacks", "127.0.0.1:1"}).stacks);
}

TEST_CASE("crun status --help carries the help and checks nothing else", "[status]") {
  for (const char* flag : {"-h", "--help"}) {
    const auto r = parse_status_arguments({flag});
    REQUIRE(r.help);
    CHECK_THAT(*r.help, Catch::Contains("crun status") && Catch::Contains("--json") && Catch::Contains("--timeout"));
  }
  CHECK(parse_status_arguments({"--timeout", "x", "--help"}).help);
}

TEST_CASE("crun status refuses bad arguments with one line naming them", "[status]") {
  CHECK_THAT(refused({}), Catch::Contains("URL"));
  CHECK_THAT(refused({"--json"}), Catch::Contains("URL"));
  CHECK_THAT(refused({"a:1", "b:2"}), Catch::Contains("b:2"));
  CHECK_THAT(refused({"a:1", "--bogus"}), Catch::Contains("--bogus"));
  CHECK_THAT(refused({"a:1", "--timeout"}), Catch::Contains("--timeout"));
  for (const char* bad : {"0", "-1", "3601", "abc", "2s", "nan", ""}) {
    INFO(bad);
    CHECK_THAT(refused({"a:1", "--timeout", bad}), Catch::Contains("--timeout") && Catch::Contains(bad));
  }
  CHECK_THAT(refused({"nonsense"}), Catch::Contains("nonsense"));
  CHECK_THAT(refused({"https://a:1"}), Catch::Contains("only http://"));
  CHECK_THAT(refused({"http://a:0"}), Catch::Contains("port 0"));
}
