// StoreChannel: one connection to the store that several threads share (docs/store-protocol.md:
// requests are matched to replies by id, notifications carry the watch's id).
//
// Contract
//   - The constructor connects and shakes hands (StoreConnection: retries until
//     options.connect_timeout, honours options.cancel), then starts the reader thread; it throws
//     what StoreConnection throws.
//   - request(op, fill, deadline, cancel) sends one request, its payload written by `fill`, and
//     blocks the calling thread until the reply with its id: the OK payload, or StoreTimeout (the
//     server's timeout status, or no reply by `deadline`: the channel is then unusable, the
//     stream being out of step), StoreRejected (any other error status), StoreConnectionError
//     (the connection is lost or the channel closed; or `cancel` is set, also while waiting).
//     Requests from several threads interleave on the wire; frames never do.
//   - watch(prefix, on_event) registers a watch (a request like the others); from then on
//     on_event runs on the reader thread for every set or delete under `prefix`, in mutation
//     order. It must not block, nor make requests (their replies come through that thread).
//   - on_lost(why) runs once, on the reader thread, when the connection breaks; not when the
//     channel is being destroyed. Every blocked request fails then too.
//   - wake() makes every waiting request look at its `cancel` flag again.
//   - set, set_ephemeral, get, try_get, list_keys: those requests, encoded and decoded as TcpStore
//     does (docs/store-protocol.md); an ephemeral key belongs to this one connection.
//   - Memory: one reply buffer (StoreConnection's, growing with the replies), the waiting
//     requests' replies until their callers take them.
//
// Threading
//   request(), watch(), wake() from any thread but the reader's; the destructor from any thread
//   but the reader's (it interrupts the connection and joins the reader).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_client.h"
#include "store/store_protocol.h"

namespace crun {

class StoreChannel {
 public:
  StoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
               std::function<void(const std::string& why)> on_lost);
  ~StoreChannel();
  StoreChannel(const StoreChannel&) = delete;
  StoreChannel& operator=(const StoreChannel&) = delete;

  using Fill = std::function<void(wire::Writer&)>;
  using Clock = std::chrono::steady_clock;
  // `what` names the request in errors ("set 'key'").
  std::string request(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline,
                      const std::atomic<bool>* cancel = nullptr);
  void watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event,
             Clock::time_point deadline);
  void wake();

  // The requests the rendezvous makes, over request(): as TcpStore's of the same names.
  void set(const std::string& key, std::string_view value, Clock::time_point deadline,
           const std::atomic<bool>* cancel = nullptr);
  void set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline,
                     const std::atomic<bool>* cancel = nullptr);
  // Waits at the server up to `wait` for the key.
  std::string get(const std::string& key, Millis wait, Clock::time_point deadline,
                  const std::atomic<bool>* cancel = nullptr);
  std::optional<std::string> try_get(const std::string& key, Clock::time_point deadline,
                                     const std::atomic<bool>* cancel = nullptr);
  std::vector<std::string> list_keys(const std::string& prefix, std::uint32_t limit, Clock::time_point deadline);

  // The local IP address of the connection (the interface that reaches the store).
  std::string local_address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
