// agent/line_collapse: identical console lines of several local ranks shown once, with a fake
// clock; each rank's lines keep their order, nothing waits past its window, memory is bounded.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <sstream>

#include "agent/line_collapse.h"
#include "agent/log_line_prefix.h"

using namespace crun;
using namespace std::chrono_literals;
using Clock = LineCollapse::Clock;

namespace {

// "{0,1,5}" before each line: easy to read back.
std::string braces(const std::vector<int>& ranks) {
  std::string p = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) p += (i ? "," : "") + std::to_string(ranks[i]);
  return p + "}";
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

LineCollapse::Limits limits(std::chrono::milliseconds window, std::size_t max_lines = 8192,
                            std::size_t max_bytes = std::size_t{1} << 20) {
  LineCollapse::Limits l;
  l.window = window;
  l.max_lines = max_lines;
  l.max_bytes = max_bytes;
  l.lines_per_rank = 0;  // the bound is exactly max_lines / max_bytes
  l.bytes_per_rank = 0;
  return l;
}

}  // namespace

TEST_CASE("a line every rank prints goes out once, as soon as the last rank printed it", "[line_collapse]") {
  LineCollapse c(limits(200ms));
  std::string out;
  const Clock::time_point t0{};
  c.begin(std::vector<bool>(8, true), braces, out);
  for (int r = 0; r < 7; ++r) c.add(r, "step 1\n", t0, out);
  CHECK(out.empty());
  REQUIRE(c.next_deadline() == t0 + 200ms);
  c.add(7, "step 1\n", t0 + 1ms, out);
  CHECK(out == "{0,1,2,3,4,5,6,7}step 1\n");
  CHECK(c.held_lines() == 0);
  CHECK(c.held_bytes() == 0);
  CHECK_FALSE(c.next_deadline());
}

TEST_CASE("each rank's lines keep its order; a line nobody else prints waits until the others are past it",
          "[line_collapse]") {
  LineCollapse c(limits(200ms));
  std::string out;
  const Clock::time_point t{};
  c.begin({true, true}, braces, out);
  c.add(0, "B\n", t, out);
  c.add(0, "A\n", t, out);
  CHECK(out.empty());       // B waits for rank 1, which may still print it
  c.add(1, "A\n", t, out);  // joins rank 0's A: rank 1 is past B now, which cannot wait for it
  CHECK(out == "{0}B\n{0,1}A\n");
  c.add(1, "B\n", t, out);  // after its A: a line of its own, held for rank 0
  CHECK(out == "{0}B\n{0,1}A\n");
  c.end_rank(0, t, out);
  CHECK(out == "{0}B\n{0,1}A\n{1}B\n");
}

TEST_CASE("a rank that prints a line after its window gets a line of its own", "[line_collapse]") {
  LineCollapse c(limits(150ms));
  std::string out;
  const Clock::time_point t0{};
  c.begin(std::vector<bool>(4, true), braces, out);
  for (int r = 0; r < 3; ++r) {
    c.add(r, "hello\n", t0 + std::chrono::milliseconds(r), out);
    c.end_rank(r, t0 + std::chrono::milliseconds(r), out);
  }
  c.expire(t0 + 149ms, out);
  CHECK(out.empty());
  c.expire(t0 + 150ms, out);
  CHECK(out == "{0,1,2}hello\n");
  c.add(3, "hello\n", t0 + 151ms, out);
  CHECK(out == "{0,1,2}hello\n{3}hello\n");  // everyone else has ended: out at once
}

TEST_CASE("ranks that end or are not shown never hold a line", "[line_collapse]") {
  LineCollapse c(limits(10s));
  std::string out;
  const Clock::time_point t{};
  c.begin({true, false, true, true}, braces, out);  // rank 1 is not on this stream
  c.add(0, "x\n", t, out);
  c.add(2, "x\n", t, out);
  CHECK(out.empty());
  c.end_rank(3, t, out);
  CHECK(out == "{0,2}x\n");
}

TEST_CASE("flush lets everything go at once, in order; begin flushes the previous start's lines", "[line_collapse]") {
  LineCollapse c(limits(10s));
  std::string out;
  const Clock::time_point t{};
  c.begin({true, true}, braces, out);
  c.add(0, "a\n", t, out);
  c.add(0, "b\n", t, out);
  c.flush(out);
  CHECK(out == "{0}a\n{0}b\n");
  c.add(1, "a\n", t, out);  // a later copy is a line of its own
  out.clear();
  c.begin({true, true}, braces, out);
  CHECK(out == "{1}a\n");
  c.add(0, "c\n", t, out);
  c.add(1, "c\n", t, out);  // cursors start again at each begin
  CHECK(out == "{1}a\n{0,1}c\n");
}

TEST_CASE("past the line or byte bound the oldest go out at once with the ranks they have", "[line_collapse]") {
  const std::size_t max_bytes = 64 * 1024;
  LineCollapse c(limits(60s, 100, max_bytes));
  std::string out;
  const Clock::time_point t{};
  c.begin({true, true}, braces, out);  // rank 1 never prints: nothing completes, the window is long
  std::size_t most = 0;
  for (int i = 0; i < 1000; ++i) {
    c.add(0, "line " + std::to_string(i) + " " + std::string(1000, 'x') + "\n", t, out);
    most = std::max(most, c.held_bytes());
    CHECK(c.held_lines() <= 100);
  }
  CHECK(most <= max_bytes + 1100);  // the bound, passed by at most the line that crossed it
  const auto shown = split_lines(out);
  REQUIRE(shown.size() >= 1000 - 100);
  CHECK(shown.front().rfind("{0}line 0 ", 0) == 0);
  c.flush(out);
  CHECK(split_lines(out).size() == 1000);
  CHECK(c.held_bytes() == 0);
}

TEST_CASE("random interleavings: every rank's lines come out whole and in its order", "[line_collapse]") {
  std::mt19937 rng(12345);
  for (int round = 0; round < 200; ++round) {
    const int ranks = 1 + static_cast<int>(rng() % 6);
    std::vector<std::vector<std::string>> script(static_cast<std::size_t>(ranks));
    for (auto& s : script) {
      const int n = static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) s.push_back("t" + std::to_string(rng() % 4) + "\n");  // few texts: many repeats
    }
    LineCollapse c(limits(50ms, 1 + rng() % 8, 1 << 20));
    std::string out;
    Clock::time_point now{};
    c.begin(std::vector<bool>(static_cast<std::size_t>(ranks), true), braces, out);
    std::vector<std::size_t> next(static_cast<std::size_t>(ranks), 0);
    std::size_t printed = 0;
    for (;;) {
      std::vector<int> busy;
      for (int r = 0; r < ranks; ++r)
        if (next[static_cast<std::size_t>(r)] < script[static_cast<std::size_t>(r)].size()) busy.push_back(r);
      if (busy.empty()) break;
      const int r = busy[rng() % busy.size()];
      now += std::chrono::milliseconds(rng() % 20);
      c.add(r, script[static_cast<std::size_t>(r)][next[static_cast<std::size_t>(r)]++], now, out);
      ++printed;
      if (rng() % 5 == 0) c.expire(now, out);
      if (next[static_cast<std::size_t>(r)] == script[static_cast<std::size_t>(r)].size() && rng() % 2) c.end_rank(r, now, out);
    }
    c.flush(out);
    std::vector<std::vector<std::string>> seen(static_cast<std::size_t>(ranks));
    std::size_t copies = 0;
    for (const auto& line : split_lines(out)) {
      const auto close = line.find('}');
      REQUIRE(close != std::string::npos);
      std::istringstream who(line.substr(1, close - 1));
      for (std::string r; std::getline(who, r, ',');) {
        seen[static_cast<std::size_t>(std::stoi(r))].push_back(line.substr(close + 1) + "\n");
        ++copies;
      }
    }
    INFO("round " << round);
    CHECK(copies == printed);
    CHECK(seen == script);
  }
}

TEST_CASE("the range prefix: torch's default and the template, runs and gaps", "[log_line_prefix]") {
  CHECK(rank_ranges({0, 1, 2, 3, 4, 5, 6, 7}, 0) == "0-7");
  CHECK(rank_ranges({0, 1, 2, 3, 5}, 0) == "0-3,5");
  CHECK(rank_ranges({1, 3}, 0) == "1,3");
  CHECK(rank_ranges({2, 3, 6, 7}, 8) == "10-11,14-15");
  CHECK(log_line_prefix_for_ranks("", "default", 8, {0, 1, 2, 3, 4, 5, 6, 7}) == "[default0-7]:");
  CHECK(log_line_prefix_for_ranks("", "default", 0, {0, 1, 2, 3, 5}) == "[default0-3,5]:");
  CHECK(log_line_prefix_for_ranks("[${rank}|${local_rank}]", "t", 8, {0, 1, 3}) == "[8-9,11|0-1,3]");
  for (int r : {0, 3}) {  // one rank: exactly the prefix a teed line has
    CHECK(log_line_prefix_for_ranks("", "default", 8, {r}) == log_line_prefix("", "default", 8 + r, r));
    CHECK(log_line_prefix_for_ranks("${role_name}:$rank:$local_rank ", "w", 8, {r}) ==
          log_line_prefix("${role_name}:$rank:$local_rank ", "w", 8 + r, r));
  }
}

TEST_CASE("the bound grows with the shown ranks: each may be two reads ahead of the others", "[line_collapse]") {
  LineCollapse::Limits l;
  l.window = 60s;
  l.max_bytes = 1 << 20;
  l.bytes_per_rank = 128 << 10;
  std::string out;
  const Clock::time_point t{};
  for (const int ranks : {2, 16}) {
    LineCollapse c(l);
    c.begin(std::vector<bool>(static_cast<std::size_t>(ranks) + 1, true), braces, out);  // the last one never prints
    const std::string line = std::string(1000, 'y') + "\n";
    std::size_t most = 0;
    for (int i = 0; i < 4000; ++i) {
      c.add(0, std::to_string(i) + line, t, out);
      most = std::max(most, c.held_bytes());
    }
    const std::size_t bound = std::max<std::size_t>(1 << 20, static_cast<std::size_t>(ranks + 1) * (128 << 10));
    INFO(ranks << " ranks, at most " << most << " bytes held");
    CHECK(most <= bound + 1100);
    CHECK(most >= bound - 1100);
    c.flush(out);
  }
}
