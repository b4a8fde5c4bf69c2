// agent/signal_names: signal numbers and names, both ways.
#include <catch2/catch.hpp>
#include <csignal>
#include <string>

#include "agent/signal_names.h"

using namespace crun;

TEST_CASE("signal names both ways", "[signal_names]") {
  REQUIRE(signal_number("SIGTERM") == SIGTERM);
  REQUIRE(signal_number("usr1") == SIGUSR1);
  REQUIRE(signal_number("9") == SIGKILL);
  REQUIRE_FALSE(signal_number("SIGNOPE"));
  REQUIRE_FALSE(signal_number("9x"));
  REQUIRE(signal_name(SIGSEGV) == "SIGSEGV");
}
