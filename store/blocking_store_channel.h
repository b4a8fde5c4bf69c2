// BlockingStoreChannel: a StoreChannel (store_channel.h) on an event loop of its own, run by one
// thread, for callers that block: the coordinator's watches, tests, tools.
//
// Contract
//   - The constructor returns at once; the channel connects on the wrapper's thread's loop
//     (retrying until options.connect_timeout) as StoreChannel does, and every request keeps
//     StoreChannel's behaviour: replies matched by id, the deadline, the errors it throws
//     (StoreRejected, StoreTimeout, StoreConnectionError).
//   - Each request blocks the calling thread until its reply, its deadline or the connection's
//     end, and returns what the reply carried or throws the error.
//   - watch(): from its reply on, on_event runs on the wrapper's thread for every set or delete
//     under `prefix`, in mutation order; on_lost(why) runs there once when the connection cannot
//     be made or breaks. Neither may block on a request of this wrapper.
//   - The destructor ends the channel and then the thread; no callback runs after it returned.
//
// Threading
//   Requests from any thread, several at once; never from the callbacks. The destructor while no
//   request is in progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_client.h"

namespace crun {

class BlockingStoreChannel {
 public:
  using Clock = std::chrono::steady_clock;
  BlockingStoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                       std::function<void(const std::string& why)> on_lost);
  ~BlockingStoreChannel();
  BlockingStoreChannel(const BlockingStoreChannel&) = delete;
  BlockingStoreChannel& operator=(const BlockingStoreChannel&) = delete;

  void set(const std::string& key, std::string_view value, Clock::time_point deadline);
  // Waits at the server up to `wait` for the key.
  std::string get(const std::string& key, Millis wait, Clock::time_point deadline);
  std::optional<std::string> try_get(const std::string& key, Clock::time_point deadline);
  std::vector<std::string> list_keys(const std::string& prefix, std::uint32_t limit, Clock::time_point deadline);
  void watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event, Clock::time_point deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
