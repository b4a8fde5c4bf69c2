// agent/template_text: safe_substitute as Python's string.Template.safe_substitute, for torch's
// templates (the log line prefix, the workers' ${local_rank} arguments).
#include <catch2/catch.hpp>

#include "agent/template_text.h"

using namespace crun;

TEST_CASE("safe_substitute: Python's Template.safe_substitute", "[template_text]") {
  const std::map<std::string, std::string> lr = {{"local_rank", "3"}};
  CHECK(safe_substitute("--local-rank=${local_rank}", lr) == "--local-rank=3");
  CHECK(safe_substitute("$local_rank/$local_ranks/${local_rank}x", lr) == "3/$local_ranks/3x");  // the longest name
  CHECK(safe_substitute("$$ $$local_rank", lr) == "$ $local_rank");
  CHECK(safe_substitute("${rank} ${local_rank $ ${1} $", lr) == "${rank} ${local_rank $ ${1} $");
  CHECK(safe_substitute("no dollar", lr) == "no dollar");
  CHECK(safe_substitute("", lr).empty());
  CHECK(safe_substitute("$local_rank", {}) == "$local_rank");
}
