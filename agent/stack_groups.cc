#include "agent/stack_groups.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "agent/stack_text.h"

namespace crun {
namespace {

constexpr std::size_t kSummaryFrames = 3;
constexpr int kMaxCount = kMaxStackRank + 1;
constexpr int kMaxThreadsLeftOut = 1 << 20;
constexpr std::string_view kArrow = " \xe2\x86\x90 ";  // " ← "

// The length of the UTF-8 character at s[i] (strict: no overlong form, no surrogate, at most
// U+10FFFF, as the JSON parser checks), or 0 when the bytes there are not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  }
  return n;
}

// `s` as text a console and JSON take unchanged: control characters and bytes that are not
// UTF-8 become '?', cut at a character boundary within `max` bytes.
std::string clean_text(std::string_view s, std::size_t max = kMaxTextBytes) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i);
    const std::size_t take = n == 0 ? 1 : n;
    if (out.size() + (n == 0 ? 1 : n) > max) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7f))) {
      out += '?';
    } else {
      out.append(s.substr(i, n));
    }
    i += take;
  }
  return out;
}

bool is_clean(std::string_view s) { return s.size() <= kMaxTextBytes && clean_text(s) == s; }

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A frame without its leading address: "0x7f12 ??" -> "??", "0x7f12 all_reduce" -> "all_reduce".
std::string_view without_address(std::string_view frame) {
  if (frame.size() < 3 || frame[0] != '0' || (frame[1] != 'x' && frame[1] != 'X') || !is_hex(frame[2])) return frame;
  std::size_t i = 2;
  while (i < frame.size() && is_hex(frame[i])) ++i;
  if (i == frame.size()) return "??";
  if (frame[i] != ' ') return frame;
  while (i < frame.size() && frame[i] == ' ') ++i;
  return i == frame.size() ? std::string_view("??") : frame.substr(i);
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A frame of the C runtime: agent/stack_text.h marks them with a trailing " [MODULE]".
bool c_runtime(std::string_view frame) {
  frame = trim_right(frame);
  return frame.size() > 3 && frame.back() == ']' && frame.rfind(" [") != std::string_view::npos;
}

// The function name of a frame: "stuck_here (train.py:12)" -> "stuck_here",
// "crun::all_reduce(float*, int) (runtime.cc:40)" -> "crun::all_reduce",
// "__libc_pause (pause.c:29) [libc.so.6]" -> "__libc_pause", "?? (libfoo.so)" -> "??".
std::string_view function_name(std::string_view frame) {
  std::string_view s = trim_right(frame);
  if (c_runtime(s)) s = trim_right(s.substr(0, s.rfind(" [")));
  for (int round = 0; round < 2 && !s.empty() && s.back() == ')'; ++round) {
    int depth = 0;
    std::size_t open = std::string_view::npos;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        open = i;
        break;
      }
    }
    if (open == std::string_view::npos || open == 0) break;
    s = trim_right(s.substr(0, open));
  }
  return s.empty() ? trim_right(frame) : s;
}

std::string summary_of(const std::vector<std::string>& frames, bool python) {
  std::string out;
  std::size_t taken = 0;
  for (const auto& f : frames) {
    const auto name = function_name(f);
    if (!python && !own_frame(f)) continue;
    if (taken++ > 0) out += kArrow;
    out += name;
    if (taken == kSummaryFrames) break;
  }
  if (taken == 0 && !frames.empty()) out = function_name(frames.front());
  if (out.empty()) out = "(no frames)";
  return clean_text(out);
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kDigits[v & 0xf];
  return out;
}

std::vector<std::string> normalized(const std::vector<std::string>& frames) {
  std::vector<std::string> out;
  out.reserve(frames.size());
  for (const auto& f : frames) out.emplace_back(without_address(f));
  return out;
}

std::string joined(const std::vector<std::string>& frames) {
  std::string out;
  for (const auto& f : frames) {
    out += f;
    out += '\n';
  }
  return out;
}

std::vector<std::string> shown_frames(const std::vector<std::string>& frames) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < frames.size() && i < kMaxFramesShown; ++i) out.push_back(clean_text(frames[i]));
  return out;
}

// What one rank contributes: its entry's signature and what the entry shows.
StackGroup entry_of(const RankStack& s) {
  StackGroup g;
  std::string key;
  if (!s.error.empty() || (s.threads.empty() && s.python_threads.empty())) {
    g.error = clean_text(s.error.empty() ? "no stack captured" : s.error);
    g.summary = clean_text("no stack: " + g.error);
    key = "error\n" + g.error;
  } else if (!s.python_threads.empty()) {
    g.python = true;
    const auto main_thread = normalized(s.python_threads.back());  // faulthandler lists it last
    key = "python\n" + joined(main_thread);
    g.summary = summary_of(main_thread, true);
    g.threads.push_back(shown_frames(main_thread));
  } else {
    std::vector<std::string> threads;  // each thread's frames as one text: the set, sorted
    std::vector<std::vector<std::string>> distinct;
    for (const auto& t : s.threads) {
      auto frames = normalized(t);
      std::string text = joined(frames);
      if (std::find(threads.begin(), threads.end(), text) == threads.end()) distinct.push_back(std::move(frames));
      threads.push_back(std::move(text));
    }
    std::sort(threads.begin(), threads.end());
    key = "native\n";
    for (const auto& t : threads) key += t + '\x1e';
    g.summary = summary_of(distinct.front(), false);
    for (std::size_t i = 0; i < distinct.size(); ++i) {
      if (i < kMaxThreadsShown) {
        g.threads.push_back(shown_frames(distinct[i]));
      } else {
        ++g.threads_left_out;
      }
    }
  }
  g.signature = hex16(fnv1a(key));
  return g;
}

std::int64_t listed_count(const std::vector<std::pair<int, int>>& ranges) {
  std::int64_t n = 0;
  for (const auto& [a, b] : ranges) n += static_cast<std::int64_t>(b) - a + 1;
  return n;
}

// Sorted, apart ranges from any ranges.
std::vector<std::pair<int, int>> coalesced(std::vector<std::pair<int, int>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int, int>> out;
  for (const auto& r : ranges) {
    if (!out.empty() && static_cast<std::int64_t>(r.first) <= static_cast<std::int64_t>(out.back().second) + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

int clamp_count(std::int64_t n) { return static_cast<int>(std::clamp<std::int64_t>(n, 0, kMaxCount)); }

// Sets the entry's ranges from `all` (sorted, apart) and `unlisted` ranks besides them.
void set_ranks(StackGroup& g, std::vector<std::pair<int, int>> all, std::int64_t unlisted) {
  const std::int64_t total = listed_count(all) + unlisted;
  if (all.size() > kMaxRangesPerGroup) all.resize(kMaxRangesPerGroup);
  g.ranks = std::move(all);
  g.rank_count = clamp_count(std::max<std::int64_t>(total, listed_count(g.ranks)));
}

nlohmann::json group_json(const StackGroup& g) {
  nlohmann::json j;
  j["signature"] = g.signature;
  j["line"] = g.line();
  j["ranks"] = nlohmann::json::array();
  for (const auto& [a, b] : g.ranks) j["ranks"].push_back({a, b});
  j["rank_count"] = g.rank_count;
  j["summary"] = g.summary;
  j["odd_one_out"] = g.odd_one_out;
  j["error"] = g.error;
  j["python"] = g.python;
  j["threads"] = g.threads;
  j["threads_left_out"] = g.threads_left_out;
  return j;
}

std::string dump(const StackGroups& s) {
  nlohmann::json j;
  j["attempt"] = s.attempt;
  j["rank_count"] = s.rank_count();
  j["groups"] = nlohmann::json::array();
  for (const auto& g : s.groups) j["groups"].push_back(group_json(g));
  j["groups_left_out"] = s.groups_left_out;
  j["ranks_left_out"] = s.ranks_left_out;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Order, the odd one out, the bounds: what group_stacks and merge_stack_groups both end with.
StackGroups finished(int attempt, std::vector<StackGroup> entries, std::int64_t groups_left_out,
                     std::int64_t ranks_left_out) {
  std::sort(entries.begin(), entries.end(), [](const StackGroup& a, const StackGroup& b) {
    const bool ae = !a.error.empty(), be = !b.error.empty();
    if (ae != be) return be;
    if (a.rank_count != b.rank_count) return a.rank_count > b.rank_count;
    if (a.first_rank() != b.first_rank()) return a.first_rank() < b.first_rank();
    return a.signature < b.signature;
  });
  std::size_t stacks = 0;
  for (auto& g : entries) {
    g.odd_one_out = false;
    if (g.error.empty()) ++stacks;
  }
  std::optional<std::size_t> odd;
  if (stacks >= 2 && entries[stacks - 1].rank_count < entries[stacks - 2].rank_count) {
    odd = stacks - 1;
    entries[*odd].odd_one_out = true;
  }
  StackGroups out;
  out.attempt = attempt;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    // The last place waits for the odd one out when it comes later.
    const bool last_place = out.groups.size() + 1 == kMaxGroups;
    const bool keep = out.groups.size() + 1 < kMaxGroups || (last_place && (!odd || *odd <= i));
    if (out.groups.size() < kMaxGroups && (keep || (odd && i == *odd))) {
      out.groups.push_back(std::move(entries[i]));
    } else {
      ++groups_left_out;
      ranks_left_out += entries[i].rank_count;
    }
  }
  out.groups_left_out = clamp_count(groups_left_out);
  out.ranks_left_out = clamp_count(ranks_left_out);
  // Within kMaxJsonBytes: fewer threads, then fewer frames shown, down to none.
  static constexpr std::pair<std::size_t, std::size_t> kLevels[] = {{kMaxThreadsShown, kMaxFramesShown}, {4, 16}, {1, 16},
                                                                     {1, 8}, {1, 4}, {0, 0}};
  if (dump(out).size() <= kMaxJsonBytes) return out;
  for (const auto& [threads, frames] : kLevels) {
    StackGroups smaller = out;
    for (auto& g : smaller.groups) {
      if (g.threads.size() > threads) {
        g.threads_left_out = std::min<int>(kMaxThreadsLeftOut, g.threads_left_out + static_cast<int>(g.threads.size() - threads));
        g.threads.resize(threads);
      }
      for (auto& t : g.threads) {
        if (t.size() > frames) t.resize(frames);
      }
    }
    if (dump(smaller).size() <= kMaxJsonBytes || threads == 0) return smaller;
  }
  return out;  // not reached: the last level always returns
}

// An int within [lo, hi], or nothing (nlohmann converts floats and wider numbers silently).
std::optional<int> int_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi) {
  std::int64_t n = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    n = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
  } else {
    return std::nullopt;
  }
  if (n < lo || n > hi) return std::nullopt;
  return static_cast<int>(n);
}

struct Malformed {
  std::string why;
};

const nlohmann::json& field(const nlohmann::json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) throw Malformed{std::string("no \"") + name + "\""};
  return *it;
}

int int_field(const nlohmann::json& j, const char* name, std::int64_t lo, std::int64_t hi) {
  const auto v = int_in(field(j, name), lo, hi);
  if (!v) throw Malformed{std::string("\"") + name + "\" is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  return *v;
}

bool bool_field(const nlohmann::json& j, const char* name) {
  const auto& v = field(j, name);
  if (!v.is_boolean()) throw Malformed{std::string("\"") + name + "\" is not true or false"};
  return v.get<bool>();
}

std::string text_field(const nlohmann::json& v, const char* name) {
  if (!v.is_string()) throw Malformed{std::string("\"") + name + "\" is not a string"};
  auto s = v.get<std::string>();
  if (!is_clean(s)) {
    throw Malformed{std::string("\"") + name + "\" is longer than " + std::to_string(kMaxTextBytes) +
                    " bytes or holds control characters"};
  }
  return s;
}

const nlohmann::json& array_field(const nlohmann::json& j, const char* name, std::size_t max) {
  const auto& v = field(j, name);
  if (!v.is_array()) throw Malformed{std::string("\"") + name + "\" is not an array"};
  if (v.size() > max) throw Malformed{std::string("\"") + name + "\" has more than " + std::to_string(max) + " items"};
  return v;
}

StackGroup read_group(const nlohmann::json& j) {
  if (!j.is_object()) throw Malformed{"a group is not an object"};
  StackGroup g;
  g.signature = text_field(field(j, "signature"), "signature");
  if (g.signature.size() != 16 || !std::all_of(g.signature.begin(), g.signature.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      })) {
    throw Malformed{"\"signature\" is not 16 lowercase hex digits"};
  }
  const auto& ranks = array_field(j, "ranks", kMaxRangesPerGroup);
  if (ranks.empty()) throw Malformed{"a group lists no rank"};
  std::int64_t last = -2;
  for (const auto& r : ranks) {
    if (!r.is_array() || r.size() != 2) throw Malformed{"a rank range is not [first, last]"};
    const auto a = int_in(r[0], 0, kMaxStackRank), b = int_in(r[1], 0, kMaxStackRank);
    if (!a || !b || *a > *b) throw Malformed{"a rank range is not [first, last] of ranks in [0, " + std::to_string(kMaxStackRank) + "]"};
    if (*a <= last + 1) throw Malformed{"rank ranges are not sorted and apart"};
    last = *b;
    g.ranks.emplace_back(*a, *b);
  }
  g.rank_count = int_field(j, "rank_count", 1, kMaxCount);
  if (g.rank_count < listed_count(g.ranks)) throw Malformed{"\"rank_count\" is less than the ranks listed"};
  g.summary = text_field(field(j, "summary"), "summary");
  g.error = text_field(field(j, "error"), "error");
  g.python = bool_field(j, "python");
  g.odd_one_out = bool_field(j, "odd_one_out");
  for (const auto& t : array_field(j, "threads", kMaxThreadsShown)) {
    if (!t.is_array()) throw Malformed{"a thread is not an array of frames"};
    if (t.size() > kMaxFramesShown) throw Malformed{"a thread has more than " + std::to_string(kMaxFramesShown) + " frames"};
    std::vector<std::string> frames;
    for (const auto& f : t) frames.push_back(text_field(f, "frame"));
    g.threads.push_back(std::move(frames));
  }
  g.threads_left_out = int_field(j, "threads_left_out", 0, kMaxThreadsLeftOut);
  if (!g.error.empty() && (g.odd_one_out || g.python || !g.threads.empty())) {
    throw Malformed{"an error group carries a stack or is named the odd one out"};
  }
  return g;
}

}  // namespace

std::string StackGroup::ranks_text() const {
  const std::int64_t listed = listed_count(ranks);
  std::string out = rank_count == 1 && listed == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i].first);
    if (ranks[i].second != ranks[i].first) out += "-" + std::to_string(ranks[i].second);
  }
  if (rank_count > listed) out += " and " + std::to_string(rank_count - listed) + " more";
  return out;
}

std::string StackGroup::line() const { return ranks_text() + (odd_one_out ? " (the odd one out)" : "") + ": " + summary; }

int StackGroups::rank_count() const {
  std::int64_t n = ranks_left_out;
  for (const auto& g : groups) n += g.rank_count;
  return static_cast<int>(std::min<std::int64_t>(n, std::numeric_limits<int>::max()));
}

const StackGroup* StackGroups::odd_one_out() const {
  for (const auto& g : groups) {
    if (g.odd_one_out) return &g;
  }
  return nullptr;
}

std::vector<std::string> StackGroups::lines() const {
  std::vector<std::string> out;
  for (const auto& g : groups) out.push_back(g.line());
  if (groups_left_out > 0) {
    out.push_back(std::to_string(groups_left_out) + " more group(s) (" + std::to_string(ranks_left_out) +
                  " rank(s)) left out");
  } else if (ranks_left_out > 0) {
    out.push_back(std::to_string(ranks_left_out) + " more rank(s) left out");
  }
  return out;
}

std::string StackGroups::text(std::string_view prefix) const {
  std::string out = std::string(prefix) + "stacks before the kill, grouped across " + std::to_string(rank_count()) + " rank(s):\n";
  for (const auto& line : lines()) out += std::string(prefix) + "  " + line + "\n";
  return out;
}

std::string StackGroups::to_json() const { return dump(*this); }

std::optional<StackGroups> StackGroups::from_json(std::string_view text, std::string* why) {
  const auto fail = [why](std::string reason) -> std::optional<StackGroups> {
    if (why) *why = "stack groups: " + std::move(reason);
    return std::nullopt;
  };
  if (text.size() > 4 * kMaxJsonBytes) return fail("longer than " + std::to_string(4 * kMaxJsonBytes) + " bytes");
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object()) return fail("not a JSON object");
    StackGroups s;
    s.attempt = int_field(j, "attempt", 0, std::numeric_limits<int>::max());
    std::vector<std::string> signatures;
    int odd = 0;
    for (const auto& g : array_field(j, "groups", kMaxGroups)) {
      s.groups.push_back(read_group(g));
      if (std::find(signatures.begin(), signatures.end(), s.groups.back().signature) != signatures.end()) {
        return fail("two groups have one signature");
      }
      signatures.push_back(s.groups.back().signature);
      odd += s.groups.back().odd_one_out ? 1 : 0;
    }
    if (odd > 1) return fail("more than one group is the odd one out");
    s.groups_left_out = int_field(j, "groups_left_out", 0, kMaxCount);
    s.ranks_left_out = int_field(j, "ranks_left_out", 0, kMaxCount);
    if (s.to_json().size() > kMaxJsonBytes) return fail("longer than " + std::to_string(kMaxJsonBytes) + " bytes as written");
    return s;
  } catch (const Malformed& m) {
    return fail(m.why);
  } catch (const nlohmann::json::exception& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
}

StackGroups group_stacks(const std::vector<RankStack>& stacks, int attempt) {
  std::map<std::string, StackGroup> by_signature;
  std::map<std::string, std::vector<std::pair<int, int>>> ranks;
  std::set<int> seen;
  std::int64_t out_of_range = 0;
  for (const auto& s : stacks) {
    if (s.rank < 0 || s.rank > kMaxStackRank) {
      ++out_of_range;
      continue;
    }
    if (!seen.insert(s.rank).second) continue;  // the first capture of a rank counts
    StackGroup g = entry_of(s);
    ranks[g.signature].emplace_back(s.rank, s.rank);
    by_signature.try_emplace(g.signature, std::move(g));  // the first rank's shows
  }
  std::vector<StackGroup> entries;
  for (auto& [signature, g] : by_signature) {
    set_ranks(g, coalesced(std::move(ranks[signature])), 0);
    entries.push_back(std::move(g));
  }
  return finished(attempt, std::move(entries), 0, out_of_range);
}

StackGroups merge_stack_groups(const std::vector<StackGroups>& parts) {
  int attempt = 0;
  for (const auto& p : parts) attempt = std::max(attempt, p.attempt);
  std::map<std::string, StackGroup> by_signature;
  std::map<std::string, std::pair<std::vector<std::pair<int, int>>, std::int64_t>> ranks;  // listed, unlisted
  std::int64_t groups_left_out = 0, ranks_left_out = 0;
  for (const auto& p : parts) {
    if (p.attempt != attempt) continue;
    groups_left_out += p.groups_left_out;
    ranks_left_out += p.ranks_left_out;
    for (const auto& g : p.groups) {
      auto& [listed, unlisted] = ranks[g.signature];
      listed.insert(listed.end(), g.ranks.begin(), g.ranks.end());
      unlisted += g.rank_count - listed_count(g.ranks);
      auto [it, fresh] = by_signature.try_emplace(g.signature, g);
      if (!fresh && g.first_rank() < it->second.first_rank()) it->second = g;  // the lowest rank's shows
    }
  }
  std::vector<StackGroup> entries;
  for (auto& [signature, g] : by_signature) {
    auto& [listed, unlisted] = ranks[signature];
    set_ranks(g, coalesced(std::move(listed)), unlisted);
    entries.push_back(std::move(g));
  }
  return finished(attempt, std::move(entries), groups_left_out, ranks_left_out);
}

}  // namespace crun
