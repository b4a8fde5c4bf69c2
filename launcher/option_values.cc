#include "launcher/option_values.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace crun {

std::optional<bool> parse_bool(std::string_view text) {
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && blank(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && blank(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "1" || t == "true" || t == "t" || t == "yes" || t == "y" || t == "on") return true;
  if (t == "0" || t == "false" || t == "f" || t == "no" || t == "n" || t == "off") return false;
  return std::nullopt;
}

}  // namespace crun
