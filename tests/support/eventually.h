// eventually(pred, bound): polls `pred` (a state with no event to wait on: a server statistic,
// a /proc file) until it holds or `bound` passes, yielding between tries; returns its final value
// so that the caller asserts what it waited for.
// Threading: the calling thread.
#pragma once

#include <chrono>
#include <thread>

namespace crun::test {

template <typename Pred>
bool eventually(Pred&& pred, std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::yield();
  }
  return true;
}

}  // namespace crun::test
