// StoreChannel: one connection to the store with one I/O thread of its own, shared by every thread
// of its owner; or, given the owner's event loop and a connection already made, run on that loop
// with no thread (docs/store-protocol.md: requests are matched to replies by id, notifications
// carry the watch's id).
//
// Contract (on a loop, "the I/O thread" below is the loop's thread: the hello and the frames
// made before it go out when the loop first runs the channel, replies are read as the socket
// becomes readable, and deadlines and at() are kept by a timer on the loop)
//   - The constructor returns at once. The I/O thread connects (StoreConnection: retrying until
//     options.connect_timeout; the destructor cuts that short), runs on_connected, and sends the
//     handshake's hello, the requests made before the connection (kept in memory, in the order
//     they were made) and what on_connected made, in one write; then it reads the server's answer
//     to the hello, and replies and notifications until the connection breaks or the channel is
//     destroyed. A refused hello fails every request like a connection that could not be made,
//     also where a send failed first (a server at its limit answers and closes at once).
//   - Given a connection already made (StoreConnection::connect_once), the I/O thread uses it
//     and does not connect.
//   - Asynchronous requests (set, set_ephemeral, get, try_get, list_keys, watch with a `done`
//     callback; encoded and decoded as TcpStore's of the same names): the frame is written at once
//     by the calling thread (kept before the connection; held to the end of a corked() body) and
//     `done` runs once, on the I/O thread, with the result or the error: StoreRejected or
//     StoreTimeout (the reply's status), StoreConnectionError (the connection could not be made,
//     broke, or was already unusable: then `done` may run at once on the caller's thread),
//     StoreRejected (the hello was refused), StoreTimeout (no reply by the deadline; a late reply
//     is dropped and the stream stays in step). The I/O thread notices a deadline when it next
//     wakes: a reply, a notification, its timer, or the earliest deadline it knew of when it went
//     to sleep; an owner that makes requests from other threads keeps its timer running.
//   - Synchronous requests (the same names with an optional `cancel` instead of `done`) block the
//     calling thread until the reply, `deadline` or `cancel` (StoreConnectionError "cancelled";
//     wake() makes waiting requests look at their flag again).
//   - watch(): from its reply on, on_event runs on the I/O thread for every set or delete under
//     `prefix`, in mutation order. It must not block.
//   - at(when, fn): fn runs once on the I/O thread at `when` (one timer: a new call replaces it).
//     Set it from the I/O thread's callbacks (on_connected, done, the timer's fn): a sleeping I/O
//     thread does not see a timer set by another thread before it wakes.
//   - on_lost(why) runs once, on the I/O thread, when the connection cannot be made or breaks,
//     after every pending request's `done` got the error; never once the destructor began, and
//     no callback runs from then on.
//   - Memory: one reply buffer (StoreConnection's, growing with the replies), the frames made
//     before the handshake, one entry per request awaiting its reply.
//
// Threading
//   On a loop: every call from the loop's thread, synchronous requests refused; the destructor
//   too (no callback runs after it began). Otherwise: requests of either kind and wake() from any thread; asynchronous ones also from the I/O
//   thread's callbacks (writing does not wait for replies). Synchronous requests and the
//   destructor never from the I/O thread. local_address(): once on_connected ran ("" before).
#pragma once

#include <atomic>
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
  StoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
               std::function<void(const std::string& why)> on_lost, std::function<void()> on_connected = {});
  StoreChannel(std::unique_ptr<StoreConnection> connected, const StoreEndpoint& endpoint,
               const StoreClientOptions& options, std::function<void(const std::string& why)> on_lost,
               std::function<void()> on_connected = {});
  // With `loop` and a connection already made (connect_once): on the owner's event loop, no
  // thread of its own; the connection is read there and every callback runs there. Every call
  // from the loop's thread; synchronous requests are refused (std::logic_error): they would
  // wait on the loop itself. Without either, as the constructor above (a thread that connects).
  StoreChannel(boost::asio::io_context* loop, std::unique_ptr<StoreConnection> connected, const StoreEndpoint& endpoint,
               const StoreClientOptions& options, std::function<void(const std::string& why)> on_lost,
               std::function<void()> on_connected = {});
  ~StoreChannel();
  StoreChannel(const StoreChannel&) = delete;
  StoreChannel& operator=(const StoreChannel&) = delete;

  // Asynchronous: the error (null: done), and what the request returns.
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
  // Runs `body`; the frames the calling thread makes meanwhile go out in one write after it (no
  // synchronous request inside: its frame would wait for the end of `body`).
  void corked(const std::function<void()>& body);

  // Synchronous.
  void set(const std::string& key, std::string_view value, Clock::time_point deadline,
           const std::atomic<bool>* cancel = nullptr);
  void set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline,
                     const std::atomic<bool>* cancel = nullptr);
  std::string get(const std::string& key, Millis wait, Clock::time_point deadline,
                  const std::atomic<bool>* cancel = nullptr);
  std::optional<std::string> try_get(const std::string& key, Clock::time_point deadline,
                                     const std::atomic<bool>* cancel = nullptr);
  std::vector<std::string> list_keys(const std::string& prefix, std::uint32_t limit, Clock::time_point deadline);
  void watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event, Clock::time_point deadline);
  void wake();

  // The local IP address of the connection (the interface that reaches the store).
  std::string local_address() const;
  // What made the channel unusable (StoreConnectionError; StoreRejected for a refused handshake),
  // set before on_lost runs; null while it works.
  std::exception_ptr failure() const;
  // The server accepted the handshake (then or earlier).
  bool reached() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
