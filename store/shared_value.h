// SharedValue: the bytes of a large stored value, held once and referenced by the KeySpace and by
// every reply that carries it (store/reply_queue.h), so that N replies of one value cost one copy.
//
// Contract
//   - Values of kShareFrom bytes or more are kept as a SharedValue; smaller ones are copied into
//     each reply (cheaper than a reference below that size).
//   - `bytes` never changes while anything besides the KeySpace holds a reference (use_count() > 1):
//     a write to the key then makes a new SharedValue, and the replies keep the old bytes.
//   - `queued_replies` counts the reply queues that reference it; the server's reply bound counts
//     its bytes once while that is non-zero (store/reply_budget.h).
//
// Threading
//   The server's event-loop thread only, like its KeySpace.
#pragma once

#include <cstddef>
#include <string>

namespace crun {

struct SharedValue {
  static constexpr std::size_t kShareFrom = 64 * 1024;
  std::string bytes;
  mutable std::size_t queued_replies = 0;
};

}  // namespace crun
