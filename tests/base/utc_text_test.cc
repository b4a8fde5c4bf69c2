// utc_text: a moment as ISO 8601 UTC text, with 0, 3 or 6 digits of the second.
#include <catch2/catch.hpp>

#include "base/utc_text.h"

using crun::utc_text;

TEST_CASE("utc_text writes UTC with the fraction asked for, truncated", "[utc_text]") {
  // 2026-11-29T03:10:00Z is 1795921800 s after the epoch.
  const std::int64_t t = 1795921800LL * 1000000 + 123987;
  CHECK(utc_text(t, 0) == "2026-11-29T03:10:00Z");
  CHECK(utc_text(t, 3) == "2026-11-29T03:10:00.123Z");
  CHECK(utc_text(t, 6) == "2026-11-29T03:10:00.123987Z");
  CHECK(utc_text(0, 3) == "1970-01-01T00:00:00.000Z");
  CHECK(utc_text(999999, 6) == "1970-01-01T00:00:00.999999Z");
}
