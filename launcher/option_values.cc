#include "launcher/option_values.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace crun {

std::string trim(std::string_view text) {
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return std::string(text);
}

std::optional<bool> parse_bool(std::string_view text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "1" || t == "true" || t == "t" || t == "yes" || t == "y" || t == "on") return true;
  if (t == "0" || t == "false" || t == "f" || t == "no" || t == "n" || t == "off") return false;
  return std::nullopt;
}

std::optional<long> parse_long(std::string_view text) {
  const std::string t = trim(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(t.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  const std::string t = trim(text);
  std::size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  if (digits == 0 || digits > 20) return std::nullopt;
  std::string unit = trim(std::string_view(t).substr(digits));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  int shift = -1;
  const char* names[5][3] = {{"b", "", ""}, {"k", "kb", "kib"}, {"m", "mb", "mib"}, {"g", "gb", "gib"}, {"t", "tb", "tib"}};
  for (int i = 0; i < 5 && shift < 0; ++i) {
    for (const char* name : names[i]) {
      if (*name != '\0' && unit == name) shift = 10 * i;
    }
  }
  if (unit.empty()) shift = 0;
  if (shift < 0) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(t.substr(0, digits).c_str(), nullptr, 10);
  if (errno != 0 || (shift > 0 && v > (~0ULL >> shift))) return std::nullopt;
  return static_cast<std::uint64_t>(v) << shift;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace crun
