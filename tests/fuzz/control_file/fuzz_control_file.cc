// A worker's CRUN_CONTROL_FILE as the agent parses it when the worker exits (agent/control_file.h):
// any bytes, with a claimed file size from the input's first byte (past the bound or not). Checks
// the documented bounds: at most kShownRequests requests and kShownIgnored entries kept, every
// reason printable (no control character, valid UTF-8, within a line's bound), `governing` a
// stop-job whenever any kept request is one, and printable() idempotent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/control_file.h"
#include "base/control_requests.h"

namespace {

bool clean(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) return false;
  }
  return crun::printable(s) == s;  // valid UTF-8 passes unchanged
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Half the inputs claim a file past the bound: the reader's view of a file that kept growing.
  const std::uint64_t file_size = data[0] & 1 ? crun::kControlFileMaxBytes + data[0] : text.size();
  const auto r = crun::parse_control_file(text, file_size);
  if (r.requests.size() > crun::kShownRequests || r.ignored.size() > crun::kShownIgnored) std::abort();
  if (r.more_requests > 0 && r.requests.size() != crun::kShownRequests) std::abort();
  bool any_stop = false;
  for (const auto& q : r.requests) {
    if (!clean(q.reason) || q.reason.size() > crun::kControlLineMaxBytes) std::abort();
    if (!q.reason.empty() && (q.reason.front() == ' ' || q.reason.back() == ' ')) std::abort();
    any_stop = any_stop || q.kind == crun::WorkerRequest::Kind::kStopJob;
  }
  if (!r.requests.empty() && !r.governing) std::abort();
  if (r.governing && !clean(r.governing->reason)) std::abort();
  if (any_stop && r.governing->kind != crun::WorkerRequest::Kind::kStopJob) std::abort();
  for (const auto& why : r.ignored) {
    if (!clean(why) || why.size() > 200) std::abort();
  }
  const std::string once = crun::printable(text);
  if (crun::printable(once) != once || !clean(once)) std::abort();
  return 0;
}
