// ReplicaLink: one replication connection (agent/replica_protocol.h), either end, on the agent's
// loop: what arrives is decoded and handed to its handlers, a set received is written to a
// temporary directory, and what it sends (messages, whole sets of files) goes out in order.
//
// Contract
//   - Memory is bounded whatever the peer does: a 64 KiB read buffer, the decoder's one header,
//     and for a set being sent its open descriptors (file bytes go by sendfile from the file to
//     the socket, never through memory). A set received is written to files as it arrives.
//   - A set arriving is written under `incoming_root`/.incoming-<rank>-<random>/ (made when it
//     begins). Once its last byte is in, on_set hands the directory to the handler, which moves
//     it away (or leaves it: it is removed). A connection that ends in the middle of a set
//     removes what it wrote: a half-received set is never seen by anybody.
//   - A set sent is a snapshot: its files were opened before it was queued, so a later commit
//     (a rename over a name) does not change what goes out.
//   - Malformed input, a failed read or write, a handler's refusal (on_hello false) or close():
//     the socket is closed once and on_closed runs once with one line saying why ("" for a
//     close by this end). No handler runs after that.
//
// Threading
//   Everything on the io_context's one thread. Held by shared_ptr: its pending operations keep
//   it alive until the socket closes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/replica_protocol.h"

namespace boost::asio {
class io_context;
}

namespace crun {

// A file of a set about to be sent: opened already (the snapshot), its size at that moment.
struct OutgoingFile {
  std::string name;
  int fd = -1;  // owned by the set
  std::uint64_t size = 0;
};

struct OutgoingSet {
  int rank = 0;
  std::uint64_t sequence = 0;
  std::vector<OutgoingFile> files;
  OutgoingSet() = default;
  OutgoingSet(OutgoingSet&& o) noexcept;
  OutgoingSet& operator=(OutgoingSet&& o) noexcept;
  OutgoingSet(const OutgoingSet&) = delete;
  OutgoingSet& operator=(const OutgoingSet&) = delete;
  ~OutgoingSet();
  std::uint64_t bytes() const;
};

// A set received, complete, in its temporary directory.
struct ReceivedSet {
  int rank = 0;
  std::uint64_t sequence = 0;
  std::filesystem::path dir;
  std::vector<std::pair<std::string, std::uint64_t>> files;  // name, size
  std::uint64_t bytes = 0;
};

struct ReplicaLinkHandlers {
  std::function<bool(std::string_view token)> on_hello;  // false: the peer is refused (closed)
  std::function<void(int rank)> on_query;
  std::function<void(int rank)> on_get;
  std::function<void(int rank, std::uint64_t sequence)> on_have;
  std::function<void(int rank, std::uint64_t sequence)> on_ack;
  std::function<void(ReceivedSet&)> on_set;  // move set.dir away to keep it
  std::function<void()> on_drained;          // everything queued has been written
  std::function<void(const std::string& why)> on_closed;
};

class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  virtual void start() = 0;  // begins reading
  virtual void send(std::string bytes) = 0;
  virtual void send_set(OutgoingSet set) = 0;
  virtual void close(const std::string& why = "") = 0;
  virtual bool open() const = 0;
  virtual bool idle() const = 0;  // nothing queued to write
  virtual std::string peer() const = 0;
};

// Takes a connected TCP socket's descriptor (closed with the link).
std::shared_ptr<ReplicaLink> make_replica_link(boost::asio::io_context& io, int socket_fd, replica::ReplicaDecoder::Side side,
                                               std::uint64_t max_set_bytes, std::filesystem::path incoming_root,
                                               ReplicaLinkHandlers handlers);

}  // namespace crun
