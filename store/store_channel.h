// StoreChannel: one connection to the store, run on its owner's event loop (docs/store-protocol.md:
// requests are matched to replies by id, notifications carry the watch's id). Callers that want
// blocking calls from threads of their own use BlockingStoreChannel (blocking_store_channel.h).
//
// Contract
//   - The constructor returns at once. Given a connection (StoreConnection::connect_once), the
//     channel uses it; without one, a helper thread makes it (StoreConnection: retrying until
//     options.connect_timeout; the destructor cuts that short) and hands it to the loop, then
//     ends. Once the loop has the connection it runs on_connected and sends, in one write, the
//     hello, the requests made before (in order) and what on_connected made; replies are read as
//     the socket becomes readable, the server's answer to the hello first.
//   - Requests (set, set_ephemeral, get, try_get, list_keys, watch; encoded as TcpStore's of the
//     same names): the frame is written at once (kept before the connection; held to the end of a
//     corked() body), and `done` runs once, on the loop, with the result or the error:
//     StoreRejected or StoreTimeout (the reply's status), StoreConnectionError (the connection
//     could not be made, broke, or was already unusable: then `done` runs at once, inside the
//     call), StoreRejected (the hello was refused: every request fails as for a store never
//     reached, also where a send failed first), StoreTimeout (no reply by the deadline, kept by a
//     timer on the loop; a late reply is dropped and the stream stays in step).
//   - watch(): from its reply on, on_event runs for every set or delete under `prefix`, in
//     mutation order.
//   - at(when, fn): fn runs once at `when` (one timer: a new call replaces it).
//   - on_lost(why) runs once when the connection cannot be made or breaks, after every pending
//     request's `done` got the error. No callback runs once the destructor began.
//   - A loop turn handles at most 256 replies, so a flood of notifications does not hold it.
//   - Memory: one reply buffer (StoreConnection's, growing with the replies), the frames made
//     before the connection, one entry per request awaiting its reply.
//
// Threading
//   Every call, the destructor included, and every callback on the loop's thread (construction
//   may also precede the loop's first run on another thread). A send that finds the socket's
//   buffer full blocks the loop until the server reads, up to the request's deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_client.h"
#include "store/store_protocol.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class StoreConnection;

class StoreChannel {
 public:
  using Clock = std::chrono::steady_clock;
  // `connected` may be null: the channel then connects to `endpoint` itself.
  StoreChannel(boost::asio::io_context& loop, std::unique_ptr<StoreConnection> connected, const StoreEndpoint& endpoint,
               const StoreClientOptions& options, std::function<void(const std::string& why)> on_lost,
               std::function<void()> on_connected = {});
  ~StoreChannel();
  StoreChannel(const StoreChannel&) = delete;
  StoreChannel& operator=(const StoreChannel&) = delete;

  // The error (null: done), and what the request returns.
  using Done = std::function<void(std::exception_ptr)>;
  using GotValue = std::function<void(std::exception_ptr, std::optional<std::string>)>;
  using GotKeys = std::function<void(std::exception_ptr, std::vector<std::string>)>;
  void set(const std::string& key, std::string_view value, Clock::time_point deadline, Done done);
  void set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline, Done done);
  // Waits at the server up to `wait` for the key; the value is always there on success.
  void get(const std::string& key, Millis wait, Clock::time_point deadline, GotValue done);
  void try_get(const std::string& key, Clock::time_point deadline, GotValue done);
  void list_keys(const std::string& prefix, std::uint32_t limit, Clock::time_point deadline, GotKeys done);
  void watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event, Clock::time_point deadline,
             Done done);
  void at(Clock::time_point when, std::function<void()> fn);
  // Runs `body`; the frames it makes go out in one write after it.
  void corked(const std::function<void()>& body);

  // The local IP address of the connection (the interface that reaches the store); "" before
  // on_connected ran.
  std::string local_address() const;
  // What made the channel unusable (StoreConnectionError; StoreRejected for a refused handshake),
  // set before on_lost runs; null while it works.
  std::exception_ptr failure() const;
  // The server accepted the handshake.
  bool reached() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
