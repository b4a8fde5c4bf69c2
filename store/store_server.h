// StoreServer: crun's key-value store server (docs/store-protocol.md) on one Boost.Asio
// io_context: its reactor watches the listeners and every connection's socket, and its thread
// sleeps in that reactor whenever no handler is ready.
//
// Contract
//   - Listens on host:port (port 0 = OS-assigned; port() tells the bound one), and on a loopback or
//     wildcard host also on the local socket named after it (store/local_socket.h: crun's own
//     clients on this host come that way, without TCP), and serves every
//     operation of the Store contract plus watches, with request ids so clients may pipeline;
//     torch's TCPStore clients on the same port (the first byte tells them apart; StoreSession).
//   - A misbehaving connection (bad magic, wrong token, oversized or malformed frame, a frame left
//     half-sent past the read timeout, a client that never reads its replies) is closed with one
//     logged reason (a connection that never sent a byte is closed at the handshake timeout
//     without one: torch 1.x's idle second connection); every other connection keeps being served. Memory per connection grows with
//     the bytes it actually sent (StoreSession), never with what a header declares.
//   - Replies queued for connections that have not taken them are bounded per connection
//     (max_outbound_bytes) and over all of them (max_queued_reply_bytes, store/reply_budget.h):
//     past the latter, the connection with the most bytes queued is dropped first, with one
//     logged line (its peer, its bytes, the bound), until the sum fits. Replies of one large
//     stored value share its bytes (store/reply_queue.h), which count once in that sum.
//   - Logging never blocks the event loop: lines go to `log`, else to base/log.h's log_line on
//     the loop's thread (start()'s thread writes them to stderr only when it can take them now;
//     on a loop of the caller's, the caller's redirect decides), rate-limited per kind, with a
//     count of what was suppressed.
//   - Blocking operations (get/wait/multi_get) park on the server and are answered when the keys
//     appear or their timeout passes; a vanished client's parked requests are dropped.
//   - Every descriptor it opens is close-on-exec. At start it raises the process' soft open-files
//     limit toward max_connections (base/open_files.h: within the hard limit), and logs one line
//     when the hard limit holds fewer.
//
// Threading
//   All state lives on one io_context thread. Either the server owns that thread (start() /
//   stop()), or it is embedded in a caller's io_context, which the caller runs. The accessors
//   port()/endpoint() are safe from any thread after construction. stop() may be called from any
//   thread; the destructor stops the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace crun {

struct StoreServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string token;                         // non-empty: clients must present it
  std::size_t max_connections = 16384;
  std::size_t max_pending_per_connection = 1024;  // parked gets/waits per connection
  std::size_t max_outbound_bytes = 256u << 20;    // unread replies before a client is dropped
  // Unread replies over all connections (0: none) before the heaviest reader is dropped.
  std::size_t max_queued_reply_bytes = std::size_t{1} << 30;
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds frame_timeout{30000};  // a started frame may go this long without a byte
  bool log_closes = false;  // also log connections that closed normally (debugging)
  // Also listen on the local socket (store/local_socket.h) when the host is loopback or wildcard;
  // false: TCP alone.
  bool local_socket = true;
  // Receives each log line (newline-terminated), on the server thread; must not block.
  std::function<void(const std::string&)> log;
};

struct StoreServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t local_connections_accepted = 0;  // of those, through the local socket
  std::uint64_t connections_dropped = 0;  // closed by the server for a protocol reason
  std::uint64_t open_connections = 0;
  std::uint64_t keys = 0;
  std::uint64_t parked_requests = 0;  // blocked gets/waits not yet answered
  std::uint64_t bytes_received = 0;   // from every connection, since the start
  std::uint64_t input_buffer_bytes = 0;  // held now for incomplete preambles and frames
  std::uint64_t queued_reply_bytes = 0;  // replies not yet taken, as max_queued_reply_bytes counts them
};

class StoreServer {
 public:
  // Owns its own io_context and thread (call start()).
  explicit StoreServer(StoreServerOptions options);
  // Embedded in `io`: accepting begins at once; the caller runs `io`.
  StoreServer(boost::asio::io_context& io, StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Starts the owned thread (only for the owning constructor).
  void start();
  // Closes the listener and every connection; joins the owned thread if any.
  void stop();

  std::uint16_t port() const;
  std::string host() const;
  std::string endpoint() const;  // "host:port"
  // Snapshot, taken on the server thread (blocks the caller briefly); not for hot paths.
  StoreServerStats stats();

  struct Impl;  // defined in store_server.cc only

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
