// launcher/option_values: one boolean reader for PET_* flag variables and --rdzv-conf keys.
#include <catch2/catch.hpp>

#include "launcher/option_values.h"

using crun::parse_bool;

TEST_CASE("parse_bool reads torch's boolean words in any case", "[option_values]") {
  for (const char* yes : {"1", "true", "True", "TRUE", "t", "yes", "Y", "on", "ON", " on "}) {
    INFO(yes);
    CHECK(parse_bool(yes) == true);
  }
  for (const char* no : {"0", "false", "False", "f", "no", "N", "off", "Off", "\tfalse\n"}) {
    INFO(no);
    CHECK(parse_bool(no) == false);
  }
  for (const char* bad : {"", " ", "2", "yes please", "enable", "truee", "-1"}) {
    INFO(bad);
    CHECK_FALSE(parse_bool(bad).has_value());
  }
}
