// StackGroups: the workers' stacks before a kill, grouped across ranks: one entry per distinct
// stack with the ranks that share it, the entry with the fewest ranks named the odd one out
// (docs/operations.md, "Stacks before the kill", "Grouped across ranks"). What each node makes of
// its own ranks' RankStacks (agent/rank_stack.h), publishes, and node rank 0 merges.
//
// Contract
//   - group_stacks(stacks, attempt): a rank's signature is
//       * its capture error, when `error` is not "" (what was had with it is not compared): ranks
//         whose capture failed with the same text form one entry of their own;
//       * else, for a Python rank (python_threads not empty), its Python main thread's frames
//         only: python_threads.back(), the main thread, which faulthandler lists last
//         (agent/stack_text.h);
//       * else the set of its native threads' stacks (each thread's frames, the threads in any
//         order), so two native ranks are equal when every thread of one has its twin in the other;
//       * a rank with neither stacks nor error counts as the error "no stack captured".
//     Frames are compared after a leading address ("0x7f3a... ") is dropped, so "0x7f12 ??" and
//     "0x7f99 ??" are equal. Equal signatures (FNV-1a 64 of the text: `signature`, 16 hex
//     digits) make one entry.
//   - An entry's summary: its shown thread's innermost meaningful frames, at most 3, function
//     names only (a trailing "(file:line)" and argument list dropped), joined by " ← "
//     ("all_reduce ← train_step ← main"). Python frames all count; native frames skip unknown
//     ones ("??", "?? (libfoo.so)") and the C and C++ runtimes' (a frame agent/stack_text.h
//     marks " [libc.so.6]", and "_..." and "std::..." names); when none is left, the innermost
//     frame. An error entry's summary is "no stack: <error>".
//   - Order: stack entries by rank count, most first, ties by lowest rank; then error entries in
//     the same order. The odd one out is the one stack entry with strictly the fewest ranks,
//     when there are at least two stack entries; on a tie for the fewest no entry is named (two
//     ranks in two places are not one odd rank). Error entries are never named.
//   - Bounds (what the same text may carry through the rendezvous store and be read back):
//     kMaxGroups entries (beyond them: the largest, and the odd one out, are kept; the rest are
//     counted in groups_left_out and ranks_left_out; so are ranks outside [0, kMaxStackRank]),
//     kMaxRangesPerGroup rank ranges per entry (further ranks counted in rank_count, not
//     listed), kMaxThreadsShown threads shown per entry (a Python entry shows its main thread;
//     a native one its distinct threads, first listed first; the rest counted in
//     threads_left_out), kMaxFramesShown innermost frames per shown thread, kMaxTextBytes per frame, summary and error (cut at a UTF-8 boundary; control
//     characters and bytes that are not UTF-8 become '?'). When the JSON would still pass
//     kMaxJsonBytes, fewer threads and frames are shown, down to none: the ranks and summaries
//     always fit.
//   - merge_stack_groups(parts): the grouped forms of several nodes as one (node rank 0's), with
//     no raw stack: entries of equal signature join their ranks; left-out counts add up; order,
//     odd one out and bounds as above. Only the newest attempt among the parts counts. Merging a
//     part twice changes nothing (its ranks are already there) unless its ranges were cut.
//   - to_json(): compact JSON within kMaxJsonBytes ("line" per entry is for people and not read
//     back); from_json() reads it back and returns nullopt for anything else (not JSON, a field
//     missing or of the wrong type, past a bound, ranges unsorted or overlapping, a signature that
//     is not 16 hex digits), with the first reason in `why` when given;
//     from_json(to_json(g)) == g.
//
// Threading
//   Value types and pure functions; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/rank_stack.h"

namespace crun {

inline constexpr std::size_t kMaxGroups = 16;
inline constexpr std::size_t kMaxRangesPerGroup = 32;
inline constexpr std::size_t kMaxThreadsShown = 8;
inline constexpr std::size_t kMaxFramesShown = 32;
inline constexpr std::size_t kMaxTextBytes = 200;
inline constexpr std::size_t kMaxJsonBytes = 32 * 1024;
inline constexpr int kMaxStackRank = (1 << 24) - 1;  // ranks and counts beyond are not read back

struct StackGroup {
  std::string signature;                 // 16 lowercase hex digits
  std::vector<std::pair<int, int>> ranks;  // inclusive ranges, sorted, apart (not even adjacent)
  int rank_count = 0;                    // every rank of the entry, listed in `ranks` or not
  std::string summary;
  std::string error;    // "": a stack; else the capture's error
  bool python = false;  // the signature is a Python main thread's
  std::vector<std::vector<std::string>> threads;  // shown: innermost first
  int threads_left_out = 0;
  bool odd_one_out = false;
  bool operator==(const StackGroup&) const = default;

  int first_rank() const { return ranks.empty() ? -1 : ranks.front().first; }
  // "ranks 0-6, 8-15", "rank 7"; with ranks not listed: "ranks 0-6, 8-15 and 12 more".
  std::string ranks_text() const;
  // One line for a person: "ranks 0-6, 8-15: all_reduce ← train_step ← main",
  // "rank 7 (the odd one out): read ← DataLoader.__next__".
  std::string line() const;
};

struct StackGroups {
  int attempt = 0;  // the restart count of the group the stacks were captured from
  std::vector<StackGroup> groups;
  int groups_left_out = 0;
  int ranks_left_out = 0;
  bool operator==(const StackGroups&) const = default;

  bool empty() const { return groups.empty() && groups_left_out == 0 && ranks_left_out == 0; }
  int rank_count() const;  // every rank, left-out ones included
  const StackGroup* odd_one_out() const;
  // One line per entry, then "N more group(s) (M rank(s)) left out" when some were (or "M more
  // rank(s) left out": ranks beyond kMaxStackRank).
  std::vector<std::string> lines() const;
  // "<prefix>stacks before the kill, grouped across N rank(s):\n" and each line after
  // "<prefix>  " (the failure report's text, node rank 0's console).
  std::string text(std::string_view prefix) const;

  std::string to_json() const;
  static std::optional<StackGroups> from_json(std::string_view text, std::string* why = nullptr);
};

StackGroups group_stacks(const std::vector<RankStack>& stacks, int attempt);
StackGroups merge_stack_groups(const std::vector<StackGroups>& parts);

}  // namespace crun
