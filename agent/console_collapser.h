// ConsoleCollapser (--collapse-logs): one console stream's LineCollapse (agent/line_collapse.h)
// on the agent's loop, its window kept by one timer, what it lets go written to the stream's
// ConsoleSink (agent/console_sink.h).
//
// Contract
//   - lines(local_rank, data, size): `data` holds whole console lines of that rank (each ending
//     in '\n', unprefixed); what may go out goes to the sink in one write.
//   - The timer is armed for the oldest held line's window end and re-armed only when that end
//     changes; when it fires the lines whose window passed go out. No thread, no polling.
//   - begin / end_rank / flush: LineCollapse's, written to the sink at once.
//   - Per-rank log files and the duplicate filters' files never pass through here
//     (agent/line_router.h writes them before).
//
// Threading
//   The event loop's thread only; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "agent/line_collapse.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class ConsoleSink;

class ConsoleCollapser {
 public:
  ConsoleCollapser(boost::asio::io_context& io, ConsoleSink& sink, LineCollapse::Limits limits);
  ~ConsoleCollapser();
  ConsoleCollapser(const ConsoleCollapser&) = delete;
  ConsoleCollapser& operator=(const ConsoleCollapser&) = delete;

  void begin(const std::vector<bool>& shown, LineCollapse::Prefix prefix);
  void lines(int local_rank, const char* data, std::size_t size);
  void end_rank(int local_rank);
  void flush();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
