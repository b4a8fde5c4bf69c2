#include "launcher/hostlist.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

namespace crun {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& expression) {
  // The expression may be as long as the environment allows: quote at most its start.
  constexpr std::size_t kQuoted = 200;
  const std::string quoted = expression.size() <= kQuoted ? expression : expression.substr(0, kQuoted) + "...";
  throw std::invalid_argument("invalid hostlist '" + quoted + "': " + what);
}

// `text` shortened for a message.
std::string excerpt(const std::string& text) { return text.size() <= 40 ? text : text.substr(0, 40) + "..."; }

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
  if (!all_digits(s) || ec != std::errc() || p != s.data() + s.size()) bad("'" + excerpt(s) + "' is not a number", expression);
  return v;
}

std::size_t digits(unsigned long long v) { return std::to_string(v).size(); }

// Appends v, zero-padded to `width` digits.
void append_padded(std::string& out, unsigned long long v, std::size_t width) {
  char digits_buf[24];
  const auto end = std::to_chars(digits_buf, digits_buf + sizeof digits_buf, v).ptr;
  const auto n = static_cast<std::size_t>(end - digits_buf);
  if (n < width) out.append(width - n, '0');
  out.append(digits_buf, n);
}

// LO-HI (or a single number, LO == HI), printed at least `width` digits wide.
struct Range {
  unsigned long long lo = 0, hi = 0;
  std::size_t width = 0;
  std::size_t count() const { return static_cast<std::size_t>(hi - lo + 1); }  // <= kMaxHosts
  std::size_t longest() const { return std::max(width, digits(hi)); }
};

// A host pattern: literal text, then a bracket, text, bracket, ..., text (brackets.size() + 1 texts).
struct Pattern {
  std::vector<std::string> texts{""};
  std::vector<std::vector<Range>> brackets;
};

// One bracket's body, e.g. "01-04,07" -> 01-04, 07-07.
std::vector<Range> parse_bracket(const std::string& body, const std::string& expression) {
  std::vector<Range> out;
  if (body.empty()) bad("empty brackets", expression);
  std::size_t start = 0;
  while (start <= body.size()) {
    const auto comma = body.find(',', start);
    const std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? body.size() + 1 : comma + 1;
    if (item.empty()) bad("empty range in '[" + excerpt(body) + "]'", expression);
    const auto dash = item.find('-');
    Range r;
    if (dash == std::string::npos) {
      r.lo = r.hi = number(item, expression);
      r.width = item.size();
    } else {
      const std::string lo_text = item.substr(0, dash), hi_text = item.substr(dash + 1);
      r.lo = number(lo_text, expression);
      r.hi = number(hi_text, expression);
      r.width = lo_text.size();
      if (r.hi < r.lo) bad("range '" + excerpt(item) + "' runs backwards", expression);
      if (r.hi - r.lo >= kMaxHosts) bad("range '" + excerpt(item) + "' is too large", expression);
    }
    out.push_back(r);
  }
  return out;
}

Pattern parse_pattern(const std::string& pattern, const std::string& expression) {
  Pattern p;
  std::size_t i = 0;
  while (i < pattern.size()) {
    const auto open = pattern.find('[', i);
    const auto close_early = pattern.find(']', i);
    if (close_early != std::string::npos && (open == std::string::npos || close_early < open)) {
      bad("']' without '['", expression);
    }
    p.texts.back() += pattern.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (open == std::string::npos) break;
    const auto close = pattern.find(']', open);
    if (close == std::string::npos) bad("'[' without ']'", expression);
    const std::string body = pattern.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string::npos) bad("nested brackets", expression);
    p.brackets.push_back(parse_bracket(body, expression));
    p.texts.emplace_back();
    i = close + 1;
  }
  return p;
}

// The hosts of a pattern and its longest name, counted without expanding. Throws as soon as the
// count passes `budget` (the hosts still allowed), so the products cannot overflow.
std::size_t count_hosts(const Pattern& p, std::size_t budget, std::size_t& longest, const std::string& expression) {
  std::size_t hosts = 1;
  longest = 0;
  for (const auto& t : p.texts) longest += t.size();
  for (const auto& bracket : p.brackets) {
    std::size_t values = 0, widest = 0;
    for (const auto& r : bracket) {
      values += r.count();  // each <= kMaxHosts; checked below before the next can overflow
      if (values > kMaxHosts) break;
      widest = std::max(widest, r.longest());
    }
    if (values > budget || hosts > budget / values) bad("more than " + std::to_string(kMaxHosts) + " hosts", expression);
    hosts *= values;
    longest += widest;
  }
  if (hosts > budget) bad("more than " + std::to_string(kMaxHosts) + " hosts", expression);
  if (longest > kMaxHostNameLength) {
    bad("a host name would be longer than " + std::to_string(kMaxHostNameLength) + " characters", expression);
  }
  return hosts;
}

// Appends the hosts of p, leftmost bracket varying slowest.
void expand_pattern(const Pattern& p, std::vector<std::string>& out) {
  std::vector<std::string> hosts{p.texts[0]};
  for (std::size_t b = 0; b < p.brackets.size(); ++b) {
    const std::string& text = p.texts[b + 1];
    std::vector<std::string> next;
    for (const auto& h : hosts) {
      for (const auto& r : p.brackets[b]) {
        for (auto v = r.lo;; ++v) {
          std::string name;
          name.reserve(h.size() + r.longest() + text.size());
          name.append(h);
          append_padded(name, v, r.width);
          name.append(text);
          next.push_back(std::move(name));
          if (v == r.hi) break;  // hi may be the largest unsigned long long
        }
      }
    }
    hosts = std::move(next);
  }
  out.insert(out.end(), std::make_move_iterator(hosts.begin()), std::make_move_iterator(hosts.end()));
}

// The expression's host patterns, parsed but not expanded.
std::vector<Pattern> parse_expression(const std::string& expression) {
  std::vector<Pattern> patterns;
  std::string current;
  int depth = 0;
  auto flush = [&] {
    if (!current.empty()) patterns.push_back(parse_pattern(current, expression));
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
  return patterns;
}

// Counts what the patterns expand to and throws if it passes a limit.
HostlistSize measure(const std::vector<Pattern>& patterns, const std::string& expression) {
  HostlistSize size;
  for (const auto& p : patterns) {
    std::size_t longest = 0;
    const std::size_t n = count_hosts(p, kMaxHosts - size.hosts, longest, expression);
    size.hosts += n;
    size.bytes += n * (longest + 1);  // <= kMaxHosts * (kMaxHostNameLength + 1): no overflow
    if (size.bytes > kMaxHostlistBytes) {
      bad("the hosts would take more than " + std::to_string(kMaxHostlistBytes >> 20) + " MiB", expression);
    }
  }
  return size;
}

}  // namespace

HostlistSize hostlist_size(const std::string& expression) { return measure(parse_expression(expression), expression); }

std::vector<std::string> expand_hostlist(const std::string& expression) {
  // Everything is parsed and counted first: nothing is expanded unless the whole result fits.
  const auto patterns = parse_expression(expression);
  const auto size = measure(patterns, expression);
  std::vector<std::string> out;
  out.reserve(size.hosts);
  for (const auto& p : patterns) expand_pattern(p, out);
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
