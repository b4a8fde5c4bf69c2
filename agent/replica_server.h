// ReplicaServer: this agent's replication endpoint. Peers push their ranks' committed sets to it
// (kept in a ReplicaStore) and ask it for a rank's newest set (a fetch after a node was lost).
//
// Contract
//   - Listens on `address`, port 0 (the kernel picks it; port() says which), from construction;
//     the agent announces address:port in its rendezvous record (docs/rendezvous.md).
//   - A peer's first message is its hello. With a token set, a hello whose token differs
//     (compared in constant time) closes the connection with one line; nothing it sent after is
//     read. A malformed message: one line, the connection closed.
//   - At most `max_connections` connections at a time: one more is closed at once, with one line.
//     A connection's input is bounded by the decoder (one header; a set at most max_set_bytes).
//   - A set pushed is kept when it is the origin rank's newest (ReplicaStore::keep) and
//     acknowledged with its sequence either way. A query is answered with the newest sequence
//     this node holds for the rank (0: none): its own committed set (SetSource) or a replica,
//     whichever is newer; a get with that set, or have 0.
//
// Threading
//   The agent's loop: construction, every call, every callback, the destructor (which closes
//   every connection).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/replica_link.h"
#include "agent/replica_store.h"

namespace crun {

// This node's own committed sets, for peers that fetch them.
struct SetSource {
  std::function<std::uint64_t(int rank)> sequence;                 // 0: none
  std::function<std::optional<OutgoingSet>(int rank)> snapshot;  // the set now, opened
};

struct ReplicaServerOptions {
  std::string token;  // "" = none demanded
  std::uint64_t max_set_bytes = 0;
  int max_connections = 64;
};

class ReplicaServer {
 public:
  ReplicaServer(boost::asio::io_context& io, const std::string& address, ReplicaServerOptions options,
                ReplicaStore& store, SetSource own);
  // Takes a socket listen_tcp made (closed with the server).
  ReplicaServer(boost::asio::io_context& io, int listening_fd, ReplicaServerOptions options, ReplicaStore& store,
                SetSource own);
  ~ReplicaServer();
  ReplicaServer(const ReplicaServer&) = delete;
  ReplicaServer& operator=(const ReplicaServer&) = delete;

  std::uint16_t port() const;
  int connections() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A TCP socket listening on `address` ("" = every IPv4 interface), port 0: its descriptor, its
// port in `port`. Throws std::system_error. Any thread.
int listen_tcp(const std::string& address, std::uint16_t& port);

// Constant-time equality of two secrets of the same length (different lengths: false at once).
bool same_secret(std::string_view a, std::string_view b);

}  // namespace crun
