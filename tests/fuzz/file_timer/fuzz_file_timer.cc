// torch's file-timer requests as a worker could write them into the agent's FIFO: the input is cut
// into pieces (its first byte sets the piece size), fed to the LineSplitter, and every line is
// parsed and applied to a FileTimerTable, which is then expired at the latest deadline. Checks the
// documented bounds: lines never longer than PIPE_BUF, the table within its limits, and nothing
// left after expiring past every deadline.
#include <limits.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "agent/file_timer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  crun::LineSplitter lines(PIPE_BUF);
  crun::FileTimerTable table;
  double latest = 0;
  while (!bytes.empty()) {
    const auto n = std::min(piece, bytes.size());
    lines.feed(
        bytes.substr(0, n),
        [&](std::string_view line) {
          if (line.size() > PIPE_BUF || line.find('\n') != std::string_view::npos) std::abort();
          try {
            const auto r = crun::parse_file_timer_request(line);
            if (r.pid <= 0 || r.scope_id.size() > crun::FileTimerTable::kMaxScopeIdBytes) std::abort();
            table.apply(r);
            if (r.expiration_time > latest) latest = r.expiration_time;
          } catch (const std::invalid_argument&) {
          }
        },
        [] {});
    if (lines.held() > PIPE_BUF) std::abort();
    bytes.remove_prefix(n);
  }
  if (table.size() > crun::FileTimerTable::kMaxTimers) std::abort();
  if (auto next = table.next_expiry()) {
    if (*next > latest) std::abort();
  }
  table.expire(latest);
  if (table.size() != 0 || table.next_expiry()) std::abort();
  return 0;
}
