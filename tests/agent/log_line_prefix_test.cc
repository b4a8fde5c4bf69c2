// agent/log_line_prefix: torch's default prefix and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE read as
// Python's string.Template.safe_substitute reads it.
#include <catch2/catch.hpp>

#include "agent/log_line_prefix.h"

using namespace crun;

TEST_CASE("console prefix: torch's default, or the template with torch's names", "[log_line_prefix]") {
  CHECK(log_line_prefix("", "default", 5, 1) == "[default1]:");
  CHECK(log_line_prefix("[${rank}]:", "trainer", 5, 1) == "[5]:");
  CHECK(log_line_prefix("${role_name}/${local_rank}|$rank ", "trainer", 5, 1) == "trainer/1|5 ");
  // As safe_substitute: "$$" is "$"; unknown names, unclosed braces and a lone "$" stay as written.
  CHECK(log_line_prefix("$$rank ${pid} $bogus ${rank $", "t", 5, 1) == "$rank ${pid} $bogus ${rank $");
  CHECK(log_line_prefix("$ranks:$rank-", "t", 5, 1) == "$ranks:5-");  // the longest name is the one read
  CHECK(log_line_prefix("${1}", "t", 5, 1) == "${1}");
}
