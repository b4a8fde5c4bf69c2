// launcher/option_values: one boolean reader for PET_* flag variables and --rdzv-conf keys; sizes.
#include <catch2/catch.hpp>

#include "launcher/option_values.h"

using crun::parse_bool;
using crun::parse_byte_size;

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

TEST_CASE("parse_byte_size reads sizes as CLI11's AsSizeValue does, in powers of 1024", "[option_values]") {
  CHECK(parse_byte_size("1GiB") == (std::uint64_t{1} << 30));
  CHECK(parse_byte_size("256MiB") == (std::uint64_t{256} << 20));
  CHECK(parse_byte_size("64mb") == (std::uint64_t{64} << 20));
  CHECK(parse_byte_size(" 3 K ") == 3072);
  CHECK(parse_byte_size("2T") == (std::uint64_t{2} << 40));
  CHECK(parse_byte_size("4096") == 4096);
  CHECK(parse_byte_size("12b") == 12);
  CHECK(parse_byte_size("0") == 0);
  CHECK(parse_byte_size("18446744073709551615") == ~std::uint64_t{0});
  for (const char* bad : {"", "GiB", "-5", "1.5GiB", "1XB", "1 GiB x", "18446744073709551616", "17179869184GiB", "0x10"}) {
    INFO(bad);
    CHECK_FALSE(parse_byte_size(bad).has_value());
  }
}
