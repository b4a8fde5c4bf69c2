// TcpStore: the synchronous client of crun's store server (docs/store-protocol.md).
//
// Contract
//   - connect() retries refused/unreachable connections with exponential backoff and jitter until
//     `connect_timeout`, then throws StoreConnectionError naming host:port and the last reason.
//   - Every call has a deadline: the blocking ones (get, wait, multi_get) take theirs as an
//     argument; the others use `options.timeout`. A server that does not answer in time raises
//     StoreTimeout; a lost connection raises StoreConnectionError. After either, the client is
//     broken and every later call throws (make a new one).
//   - pipeline() sends many requests before reading any reply (request ids match them up).
//   - watch() opens a second connection whose reader thread delivers change notifications.
//
// Threading
//   One TcpStore serves one thread at a time (calls are not internally locked). Watch callbacks
//   run on the watcher's own thread: post them to your event loop, never block in them.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "store/store.h"

namespace crun {

struct StoreEndpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const;
  // Parses "host:port" or "[v6]:port"; throws std::invalid_argument naming the text.
  static StoreEndpoint parse(std::string_view text);
};

// Lets another thread end a connect retry loop early (StoreConnectionError "cancelled").
class ConnectCancel {
 public:
  void cancel();
  bool cancelled() const;
  // Waits up to `d`; returns early (true) once cancelled.
  bool wait_for(Millis d) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool cancelled_ = false;
};

struct StoreClientOptions {
  Millis connect_timeout{30000};
  Millis timeout{300000};  // deadline of non-blocking operations
  std::string token;       // shared secret, when the server requires one
  std::shared_ptr<ConnectCancel> cancel;  // optional
  // An endpoint on this host is tried through the store's local socket first
  // (store/local_socket.h); false: TCP only (a test or bench standing in for remote nodes).
  bool local_socket = true;
};

// One change seen by a watch.
struct StoreEvent {
  enum class Kind : std::uint8_t { kSet = 1, kDelete = 2 };
  Kind kind;
  std::string key;
  std::string value;  // the new value (empty on delete)
};

class StoreWatch;

class TcpStore final : public Store {
 public:
  TcpStore(StoreEndpoint endpoint, StoreClientOptions options = {});
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  const StoreEndpoint& endpoint() const;
  // The local IP address this client's connection uses (the interface that reaches the store).
  std::string local_address() const;
  // Whether its connection is the store's local socket (store/local_socket.h), not TCP.
  bool is_local() const;
  // Bytes its connection holds for replies: they grow with the replies received.
  std::size_t receive_buffer_bytes() const;
  // From another thread: makes a call blocked on this connection fail at once (the client is
  // broken afterwards). The one thread-safe member.
  void interrupt();

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Millis timeout) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(std::string_view key) override;
  std::int64_t num_keys(std::string_view prefix = {}) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, Millis timeout) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  std::int64_t append(std::string_view key, std::string_view value) override;
  std::vector<std::string> list_keys(std::string_view prefix, std::size_t limit) override;
  std::optional<std::string> try_get(std::string_view key) override;
  // Sets a key that the server deletes when this client's connection closes (process exit,
  // crash, or a dropped connection), unless another write took the key over. Not part of Store:
  // it is a property of this connection.
  void set_ephemeral(std::string_view key, std::string_view value);
  // Round trip with no effect; proves the server is alive.
  void ping();

  // Pipelining: queue operations, then flush() sends them in one write and reads every reply.
  // Results come back in order; a failed operation throws from flush() after all replies arrive.
  class Pipeline {
   public:
    void set(std::string_view key, std::string_view value);
    void get(std::string_view key, Millis timeout);
    void add(std::string_view key, std::int64_t delta);
    void remove(std::string_view key);
    // Returns each operation's result: the value for get, the decimal result for add, "1" or "0"
    // for remove (whether the key existed), "" for set.
    std::vector<std::string> flush();

   private:
    friend class TcpStore;
    explicit Pipeline(TcpStore& store) : store_(store) {}
    TcpStore& store_;
    std::string out_;
    std::vector<std::uint8_t> ops_;
  };
  Pipeline pipeline() { return Pipeline(*this); }

  // Calls `on_event` for every set/delete of a key that starts with `prefix`, from a dedicated
  // connection and thread, until the returned StoreWatch is destroyed. `on_lost` runs once if the
  // watch connection breaks (server gone). The watch is registered when this returns.
  std::unique_ptr<StoreWatch> watch(std::string prefix, std::function<void(const StoreEvent&)> on_event,
                                    std::function<void(const std::string& reason)> on_lost = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A live watch; destroying it unregisters and joins its thread.
class StoreWatch {
 public:
  virtual ~StoreWatch() = default;
};

}  // namespace crun
