// LineCollapse (--collapse-logs): the console lines of one stream (stdout or stderr) of this
// node's local ranks, a line that several ranks print shown once with their ranks' prefix
// ("[default0-7]:"). Pure: no clock of its own, no I/O; what goes out is appended to a string.
//
// Contract
//   - begin(shown, prefix, out): a start of the group. shown[r]: local rank r's lines of this
//     stream reach the console (the others never come). What is still held goes out first.
//     prefix(ranks) is the prefix of a line printed by `ranks` (sorted local ranks, not empty).
//   - add(rank, line, now, out): `line` is one whole console line of `rank`, its '\n' included
//     (the router holds a line's start until its newline, as without collapsing). It joins the
//     oldest held line with the same text that was first seen after every line `rank` already has
//     held or shown; else it is held as a new line whose window ends at now + window.
//   - Held lines go out in the order they were first seen, so each rank's lines keep the order
//     it printed them in. The oldest goes out (prefix of its ranks, then its text) as soon as
//       * no shown rank can still join it: each rank not in it has ended (end_rank) or has a
//         later line held or shown; or
//       * its window has passed (add, end_rank or expire with `now` at or past its end): a rank
//         that prints the same text later gets its own line; or
//       * more lines or bytes are held than the bound: the oldest go out at once with the ranks
//         they have (memory stays bounded whatever the ranks print). The bound is max_lines and
//         max_bytes, or lines_per_rank and bytes_per_rank times the shown ranks when that is more
//         (by default 2,048 lines and 128 KiB, two of the group's 64 KiB reads, per rank).
//   - end_rank(rank, now, out): the rank's stream ended (a line it still sends is taken as any).
//   - flush(out): every held line goes out now (a stop, crun's own lines, the agent's end).
//   - next_deadline(): the oldest held line's window end; nullopt when nothing is held.
//   - Ranks outside [0, shown.size()) count as shown ranks that began with nothing.
//
// Threading
//   Not thread-safe; the agent's loop (agent/console_collapser.h) or a test.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace crun {

class LineCollapse {
 public:
  using Clock = std::chrono::steady_clock;
  using Prefix = std::function<std::string(const std::vector<int>& local_ranks)>;
  struct Limits {
    std::chrono::milliseconds window{200};
    std::size_t max_lines = 8192;
    std::size_t max_bytes = std::size_t{1} << 20;  // text, plus each line's ranks and bookkeeping
    std::size_t lines_per_rank = 2048;
    std::size_t bytes_per_rank = std::size_t{128} << 10;
  };

  explicit LineCollapse(Limits limits);

  void begin(const std::vector<bool>& shown, Prefix prefix, std::string& out);
  void add(int rank, std::string_view line, Clock::time_point now, std::string& out);
  void end_rank(int rank, Clock::time_point now, std::string& out);
  void expire(Clock::time_point now, std::string& out);
  void flush(std::string& out);
  std::optional<Clock::time_point> next_deadline() const;
  std::size_t held_lines() const { return held_.size(); }
  std::size_t held_bytes() const { return bytes_; }

 private:
  struct Held {
    std::uint64_t seq;  // order of first appearance
    std::string text;
    std::vector<int> ranks;  // in the order they joined
    Clock::time_point deadline;
  };
  static constexpr std::size_t kLineOverhead = 64;  // bytes counted for a held line besides its text

  void grow(int rank);
  bool oldest_complete();
  void release(Clock::time_point now, std::string& out);
  void emit_oldest(std::string& out);

  Limits limits_;
  std::size_t max_lines_;  // the bound for this start of the group
  std::size_t max_bytes_;
  Prefix prefix_;
  std::deque<Held> held_;  // oldest first; elements never move (only push_back / pop_front)
  std::unordered_map<std::string_view, std::vector<Held*>> by_text_;  // views of held_'s texts; seq ascending
  std::vector<std::uint64_t> last_seq_;  // per rank: its newest line's seq (0: none since begin)
  std::vector<bool> ended_;              // per rank: ended, or not shown on this stream
  std::uint64_t next_seq_ = 1;
  std::size_t bytes_ = 0;
  std::size_t lagging_ = 0;         // the rank that last kept the oldest line held: checked first
  std::vector<int> prefix_ranks_;   // the last prefix made, for the ranks it was made for
  std::string prefix_text_;
};

}  // namespace crun
