#include "base/utc_text.h"

#include <cstdio>
#include <ctime>

namespace crun {

std::string utc_text(std::int64_t unix_us, int digits) {
  const std::time_t secs = static_cast<std::time_t>(unix_us / 1000000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char text[64];
  std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  const long long us = unix_us % 1000000;
  if (digits == 3) n += static_cast<std::size_t>(std::snprintf(text + n, sizeof text - n, ".%03lld", us / 1000));
  if (digits == 6) n += static_cast<std::size_t>(std::snprintf(text + n, sizeof text - n, ".%06lld", us));
  return std::string(text, n) + "Z";
}

}  // namespace crun
