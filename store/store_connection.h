// StoreConnection: one connection to a store server, after a completed handshake.
// Internal to rendezvous/ (TcpStore and its watches use it).
//
// Contract
//   - An endpoint on this host (loopback or wildcard address) is tried first through the
//     store's local socket (store/local_socket.h: same protocol, checked owner), then over TCP;
//     StoreClientOptions::local_socket = false: TCP only.
//   - The constructor connects, retrying refused/unreachable/timed-out attempts with exponential
//     backoff (10 ms doubling to 1 s, ±50% jitter) until `connect_timeout` (a socket the kernel
//     connected to itself, nobody listening on a port of this host, counts as refused and is
//     reset at once, so it keeps no hold on the port), then performs the
//     handshake; it throws StoreConnectionError naming the endpoint and the last reason, or
//     StoreRejected when the server refuses the handshake (wrong token, version, full), also
//     when it answered and closed before the hello could be sent.
//     Handshake::kPipelined stops after connecting: the caller sends hello(options) ahead of its
//     first requests (one write, one round trip fewer) and then calls await_hello(), which
//     reads the server's answer to it (the same errors) before any reply.
//   - connect_once(endpoint, options, wait): one attempt at each of the endpoint's addresses,
//     all within `wait`, no retry; null when none connected (refused, nobody listening, a
//     socket connected to itself, timed out, unresolvable); `refused`, when given, says whether
//     nobody listened at any of them (refused, or connected to itself). A connection comes back
//     as kPipelined leaves it: the caller sends hello(options) and calls await_hello().
//   - send()/receive() honour a deadline (StoreTimeout) and raise StoreConnectionError on a lost
//     connection. receive() returns one reply frame; its payload stays valid until the next call.
//   - interrupt() may be called from another thread to make a blocked receive() fail promptly
//     ("connection interrupted").
//   - Its reply buffer grows with the bytes received (one page, doubling), never ahead of them,
//     whatever length a frame declares.
//
// Threading
//   One thread at a time, except interrupt() (a watch's reader thread is stopped so).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "store/store_client.h"
#include "store/store_protocol.h"

namespace crun {

using Clock = std::chrono::steady_clock;

class StoreConnection {
 public:
  enum class Handshake { kNow, kPipelined };
  StoreConnection(const StoreEndpoint& endpoint, const StoreClientOptions& options, Handshake handshake = Handshake::kNow);
  ~StoreConnection();
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  struct Reply {
    wire::Status status;
    std::uint32_t id;
    std::string_view payload;
  };

  static std::unique_ptr<StoreConnection> connect_once(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                                                       Millis wait, bool* refused = nullptr);
  static std::string hello(const StoreClientOptions& options);
  void await_hello();
  void send(std::string_view bytes, Clock::time_point deadline);
  Reply receive(Clock::time_point deadline);  // Clock::time_point::max(): no deadline
  void interrupt();
  // For a channel on an event loop (never blocking): the server's answer to the hello, or the
  // next reply, from what has arrived; false when it is not all here yet. Throw as their
  // blocking forms do (StoreRejected, StoreConnectionError on a closed or lost connection).
  bool try_hello();
  bool try_receive(Reply& reply);
  int fd() const { return fd_; }
  // "store 127.0.0.1:29500" — the prefix of every error message.
  const std::string& name() const { return name_; }
  // The local IP address of this connection (the interface that reaches the server; for the
  // store's local socket, the loopback address it stood for).
  std::string local_address() const;
  // Whether it went through the store's local socket (store/local_socket.h), not TCP.
  bool is_local() const { return !local_ip_.empty(); }
  // Bytes held for replies: one page at first, doubling as bigger replies arrive.
  std::size_t buffer_bytes() const { return buf_.size(); }

 private:
  static constexpr std::size_t kMinFreeBytes = 4096;  // room offered to each recv()
  // kTimeout when the deadline passes before the bytes, kInterrupted once interrupt() ended the connection.
  enum class Wait { kReply, kTimeout, kInterrupted };
  StoreConnection(int fd, std::string name);  // connect_once's: adopts a connected socket
  void use_socket(Clock::time_point connect_deadline);
  void fill(Clock::time_point deadline);
  Wait fill_or_stop(Clock::time_point deadline);
  void bound_receive(Clock::time_point deadline);
  void make_room();
  bool take_frame(Reply& reply);  // a whole frame at the buffer's start: parsed and consumed
  bool recv_now();                // what has arrived (MSG_DONTWAIT); false: nothing yet
  int fd_ = -1;
  std::atomic<bool> interrupted_{false};  // set by interrupt(), from another thread
  long long recv_timeout_ms_ = -1;  // SO_RCVTIMEO as configured; -1 unset, 0 none
  Clock::time_point hello_deadline_{};
  std::string name_;
  std::string local_ip_;  // set when connected through the store's local socket
  std::string buf_;
  std::size_t begin_ = 0, end_ = 0;
};

// Raises the error a non-OK reply carries: StoreTimeout for the server's timeout status, else
// StoreRejected; the message is `what` (the endpoint and the request), then the server's text.
[[noreturn]] void raise_reply_error(const std::string& what, wire::Status status, std::string_view payload);

// Opens a watch connection (store_watch.cc); TcpStore::watch forwards here.
std::unique_ptr<StoreWatch> open_store_watch(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                                             std::string prefix, std::function<void(const StoreEvent&)> on_event,
                                             std::function<void(const std::string&)> on_lost);

}  // namespace crun
