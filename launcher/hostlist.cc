#include "launcher/hostlist.h"

#include <cctype>
#include <charconv>
#include <stdexcept>

namespace crun {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& expression) {
  throw std::invalid_argument("invalid hostlist '" + expression + "': " + what);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

unsigned long long number(const std::string& s, const std::string& expression) {
  unsigned long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (!all_digits(s) || ec != std::errc() || p != s.data() + s.size()) bad("'" + s + "' is not a number", expression);
  return v;
}

std::string padded(unsigned long long v, std::size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// The values of one bracket's body, e.g. "01-04,07" -> 01 02 03 04 07.
std::vector<std::string> bracket_values(const std::string& body, const std::string& expression) {
  std::vector<std::string> out;
  if (body.empty()) bad("empty brackets", expression);
  std::size_t start = 0;
  while (start <= body.size()) {
    const auto comma = body.find(',', start);
    const std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? body.size() + 1 : comma + 1;
    if (item.empty()) bad("empty range in '[" + body + "]'", expression);
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      number(item, expression);
      out.push_back(item);
      continue;
    }
    const std::string lo_text = item.substr(0, dash), hi_text = item.substr(dash + 1);
    const auto lo = number(lo_text, expression), hi = number(hi_text, expression);
    if (hi < lo) bad("range '" + item + "' runs backwards", expression);
    if (hi - lo >= kMaxHosts) bad("range '" + item + "' is too large", expression);
    for (auto v = lo; v <= hi; ++v) out.push_back(padded(v, lo_text.size()));
  }
  return out;
}

// One host pattern (no top-level separators) -> its hosts, appended to out.
void expand_one(const std::string& pattern, const std::string& expression, std::vector<std::string>& out) {
  std::vector<std::string> hosts{""};
  std::size_t i = 0;
  while (i < pattern.size()) {
    const auto open = pattern.find('[', i);
    const auto close_early = pattern.find(']', i);
    if (close_early != std::string::npos && (open == std::string::npos || close_early < open)) {
      bad("']' without '['", expression);
    }
    const std::string text = pattern.substr(i, open == std::string::npos ? std::string::npos : open - i);
    for (auto& h : hosts) h += text;
    if (open == std::string::npos) break;
    const auto close = pattern.find(']', open);
    if (close == std::string::npos) bad("'[' without ']'", expression);
    const std::string body = pattern.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string::npos) bad("nested brackets", expression);
    const auto values = bracket_values(body, expression);
    if (hosts.size() * values.size() + out.size() > kMaxHosts) bad("more than " + std::to_string(kMaxHosts) + " hosts", expression);
    std::vector<std::string> next;
    next.reserve(hosts.size() * values.size());
    for (const auto& h : hosts) {
      for (const auto& v : values) next.push_back(h + v);
    }
    hosts = std::move(next);
    i = close + 1;
  }
  out.insert(out.end(), hosts.begin(), hosts.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& expression) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  auto flush = [&] {
    if (!current.empty()) expand_one(current, expression, out);
    current.clear();
  };
  for (char c : expression) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) bad("']' without '['", expression);
    if (depth == 0 && (c == ',' || std::isspace(static_cast<unsigned char>(c)))) {
      flush();
      continue;
    }
    current.push_back(c);
  }
  if (depth != 0) bad("'[' without ']'", expression);
  flush();
  return out;
}

std::vector<int> expand_tasks_per_node(const std::string& expression) {
  std::vector<int> out;
  std::size_t start = 0;
  auto fail = [&] { throw std::invalid_argument("invalid tasks-per-node list '" + expression + "'"); };
  while (start < expression.size()) {
    auto comma = expression.find(',', start);
    const std::string item = expression.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? expression.size() : comma + 1;
    std::string count_text = item, repeat_text = "1";
    if (const auto paren = item.find("(x"); paren != std::string::npos) {
      if (item.back() != ')') fail();
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count_text) || !all_digits(repeat_text) || count_text.size() > 6 || repeat_text.size() > 7) fail();
    const long count = std::stol(count_text), repeat = std::stol(repeat_text);
    if (repeat < 1 || repeat > static_cast<long>(kMaxHosts) || out.size() + static_cast<std::size_t>(repeat) > kMaxHosts) fail();
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(count));
  }
  if (out.empty()) fail();
  return out;
}

}  // namespace crun
