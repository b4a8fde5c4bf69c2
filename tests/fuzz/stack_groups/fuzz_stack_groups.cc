// Fuzzes the grouped stacks (agent/stack_groups.h): what another node publishes and node rank 0
// reads back (the first byte even), or the stacks a capture hands over (odd: the rest split into
// ranks at '\x1d', threads at '\x1e', frames at '\n'; a leading '!' makes a rank's first thread
// its error, a leading 'p' its threads Python's). A document that parses survives to_json ->
// from_json unchanged; whatever is grouped or merged stays within kMaxJsonBytes and reads back
// equal. Nothing may throw: from_json reports bad input by nullopt.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agent/stack_groups.h"

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

void must_round_trip(const crun::StackGroups& g) {
  const std::string text = g.to_json();
  if (text.size() > crun::kMaxJsonBytes) std::abort();
  const auto back = crun::StackGroups::from_json(text);
  if (!back || !(*back == g)) std::abort();
  (void)g.lines();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    std::string why;
    const auto g = crun::StackGroups::from_json(text, &why);
    if (!g) {
      if (why.empty()) std::abort();
      return 0;
    }
    must_round_trip(*g);
    must_round_trip(crun::merge_stack_groups({*g, *g}));
    return 0;
  }
  std::vector<crun::RankStack> stacks;
  int rank = 0;
  for (const auto rank_text : split(text, '\x1d')) {
    crun::RankStack s;
    s.rank = rank++ % 7;  // repeated ranks too
    const bool python = !rank_text.empty() && rank_text.front() == 'p';
    for (const auto thread : split(rank_text, '\x1e')) {
      std::vector<std::string> frames;
      for (const auto frame : split(thread, '\n')) frames.emplace_back(frame);
      (python ? s.python_threads : s.threads).push_back(std::move(frames));
    }
    if (!rank_text.empty() && rank_text.front() == '!') s.error = std::string(split(rank_text, '\x1e').front());
    stacks.push_back(std::move(s));
  }
  const auto g = crun::group_stacks(stacks, static_cast<int>(data[0]));
  must_round_trip(g);
  must_round_trip(crun::merge_stack_groups({g, crun::group_stacks({stacks.front()}, static_cast<int>(data[0]))}));
  return 0;
}
