#include "agent/template_text.h"

#include <cctype>

namespace crun {

namespace {

// Python's Template identifier: [_a-z][_a-z0-9]*, ASCII, any case.
std::size_t identifier_end(const std::string& text, std::size_t from) {
  auto head = [](char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)) != 0; };
  if (from >= text.size() || !head(text[from])) return from;
  std::size_t i = from + 1;
  while (i < text.size() && (head(text[i]) || std::isdigit(static_cast<unsigned char>(text[i])) != 0)) ++i;
  return i;
}

}  // namespace

std::string safe_substitute(const std::string& text, const std::map<std::string, std::string>& names) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t dollar = text.find('$', i);
    out += text.substr(i, dollar - i);
    if (dollar == std::string::npos) break;
    if (dollar + 1 < text.size() && text[dollar + 1] == '$') {
      out += '$';
      i = dollar + 2;
      continue;
    }
    const bool braced = dollar + 1 < text.size() && text[dollar + 1] == '{';
    const std::size_t start = dollar + (braced ? 2 : 1);
    const std::size_t end = identifier_end(text, start);
    const bool closed = !braced || (end < text.size() && text[end] == '}');
    const auto known = names.find(text.substr(start, end - start));
    if (end == start || !closed || known == names.end()) {
      out += '$';
      i = dollar + 1;
      continue;
    }
    out += known->second;
    i = end + (braced ? 1 : 0);
  }
  return out;
}

}  // namespace crun
