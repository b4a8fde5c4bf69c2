// A moment as UTC text, ISO 8601 with a Z: "2026-11-29T03:10:00Z", "...:00.123Z", "...:00.123456Z".
// The one formatter of crun's wall-clock times (events, failure reports, exclusions).
//
// Contract
//   utc_text(unix_us, digits): `unix_us` microseconds since the Unix epoch (>= 0), shown with
//   `digits` digits of the second's fraction (0, 3 or 6; truncated, not rounded).
//
// Threading
//   Pure function; thread-safe (gmtime_r).
#pragma once

#include <cstdint>
#include <string>

namespace crun {

std::string utc_text(std::int64_t unix_us, int digits);

}  // namespace crun
