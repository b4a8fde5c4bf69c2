// eu-stack's and faulthandler's output as the agent reads it before a kill (agent/stack_text.h):
// any bytes, the first byte choosing the parser. Checks the documented bounds: no more frames than
// lines, no frame longer than its line plus what the parser adds, where_text one of the frames.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/stack_text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::size_t lines = 1;
  for (char c : text) lines += c == '\n';
  crun::RankStack stack;
  std::string complaint;
  if (data[0] & 1) {
    stack.python_threads = crun::parse_faulthandler(text);
    (void)crun::faulthandler_done(text);
  } else {
    stack.threads = crun::parse_eu_stack(text, &complaint);
  }
  std::size_t frames = 0;
  for (const auto* threads : {&stack.threads, &stack.python_threads}) {
    for (const auto& t : *threads) {
      frames += t.size();
      for (const auto& f : t) {
        // A frame: its line, its source line (" (FILE:LINE)") and the module (" [MODULE]").
        if (f.size() > 3 * text.size() + 16) std::abort();
      }
    }
  }
  if (frames > lines || stack.threads.size() + stack.python_threads.size() > lines) std::abort();
  if (complaint.size() > 200) std::abort();
  const std::string where = crun::where_text(stack);
  if (!where.empty()) {
    bool found = false;
    for (const auto* threads : {&stack.threads, &stack.python_threads}) {
      for (const auto& t : *threads) {
        for (const auto& f : t) found = found || f == where;
      }
    }
    if (!found) std::abort();
  }
  return 0;
}
