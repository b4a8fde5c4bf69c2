// EtcdClient: etcd's v3 API (KV range and txn, leases, watch) through etcd's JSON gateway over
// HTTP/1.1 (Boost.Beast), plain or TLS with client certificates, failing over between members.
//
// Contract
//   - Every request is asynchronous; its callback runs exactly once on the io_context given at
//     construction, with the error (null: done; else an EtcdError, one line) and the result.
//   - All of a client's connections (its request channel, its lease channel, its watches) use one
//     current member. A connection error, a timeout or etcd's "unavailable" moves that member on
//     to the next endpoint for every connection (a watch reconnects there and resumes after the
//     last revision it delivered), and the request is retried there, until give_up_after has
//     passed since it was made: then EtcdUnreachable, naming every endpoint tried. A TLS
//     handshake or certificate failure, or etcd refusing the credentials, is EtcdRejected at
//     once. Any other error etcd answers with, or a reply that cannot be read, is an EtcdError.
//   - Requests of one channel go out one at a time, in order (HTTP/1.1, one connection each):
//     the lease channel's keep-alives never queue behind the request channel's transactions.
//   - Keys and values are bytes (base64 on the wire). Responses are bounded (16 MiB a body, 16 MiB
//     a watch message); a larger one is an error, not an allocation.
//   - close() (or destruction) cancels what is in flight; callbacks of cancelled requests do not
//     run after it.
//
// Threading
//   Everything, construction and destruction included, on the thread that runs the io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace crun {

struct EtcdEndpoint {
  std::string host;
  std::uint16_t port = 2379;
  std::string str() const;
};

struct EtcdClientOptions {
  std::vector<EtcdEndpoint> endpoints;  // every member (at least one)
  bool tls = false;                     // https
  std::string cacert;                   // PEM file of the CA that signed the members' certificates ("" = the system's)
  std::string cert;                     // this client's certificate (PEM; "" = none)
  std::string key;                      // its private key (PEM)
  std::chrono::milliseconds attempt_timeout{3000};  // one request at one member, connecting included
  std::chrono::milliseconds give_up_after{10000};   // a request's bound across members
  std::size_t first_endpoint = 0;                   // the member to start with (spreads clients)
};

// What a failed request or watch carries (as a std::exception_ptr). One line.
class EtcdError : public std::runtime_error {
 public:
  explicit EtcdError(const std::string& what, int code = 0) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }  // etcd's gRPC status code, when etcd answered with an error (else 0)

 private:
  int code_;
};
// No member answered before give_up_after.
class EtcdUnreachable : public EtcdError {
 public:
  using EtcdError::EtcdError;
};
// TLS failed, or etcd refused this client's credentials or permissions: no retry will help.
class EtcdRejected : public EtcdError {
 public:
  using EtcdError::EtcdError;
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};

struct EtcdRangeResult {
  std::int64_t revision = 0;  // the store's revision the range was read at
  std::vector<EtcdKeyValue> kvs;
};

// One comparison of a transaction; every one must hold for the success branch.
struct EtcdCompare {
  enum class Target { kModRevision, kCreateRevision, kValue };
  std::string key;
  Target target = Target::kModRevision;
  std::int64_t revision = 0;  // kModRevision, kCreateRevision (0: the key does not exist)
  std::string value;          // kValue
};

struct EtcdOp {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string range_end;  // kDelete, kRange: "" = the key alone
  std::string value;      // kPut
  std::int64_t lease = 0; // kPut: attach to this lease (0 = none)
  bool count_only = false;  // kRange: only how many keys there are
  bool keys_only = false;   // kRange: keys without their values

  static EtcdOp put(std::string key, std::string value, std::int64_t lease = 0) {
    EtcdOp op;
    op.key = std::move(key);
    op.value = std::move(value);
    op.lease = lease;
    return op;
  }
  static EtcdOp range(std::string key, std::string range_end = "") {
    EtcdOp op;
    op.kind = Kind::kRange;
    op.key = std::move(key);
    op.range_end = std::move(range_end);
    return op;
  }
};

struct EtcdTxn {
  std::vector<EtcdCompare> compare;
  std::vector<EtcdOp> success;
  std::vector<EtcdOp> failure;
};

struct EtcdTxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<EtcdKeyValue> kvs;       // what the branch's range ops read, in order
  std::vector<std::int64_t> counts;    // each range op's count of keys, in order
};

struct EtcdLease {
  std::int64_t id = 0;
  std::int64_t ttl_seconds = 0;  // 0 from a keep-alive: the lease no longer exists
};

struct EtcdEvent {
  bool deleted = false;
  EtcdKeyValue kv;  // for a delete: the key and its mod_revision (the delete's revision)
};

// The smallest key greater than every key starting with `prefix` (etcd's range_end for a prefix).
std::string etcd_prefix_end(const std::string& prefix);

class EtcdWatch;

class EtcdClient {
 public:
  template <typename T>
  using Callback = std::function<void(std::exception_ptr, T)>;  // the error (null: done), the result

  // Throws std::runtime_error naming the file when a TLS file cannot be loaded.
  EtcdClient(boost::asio::io_context& io, EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // `serializable`: read the member's own copy (no round through the leader); what this client
  // wrote through the same member before is in it.
  void range(std::string key, std::string range_end, Callback<EtcdRangeResult> done, bool serializable = false);
  void txn(EtcdTxn txn, Callback<EtcdTxnResult> done);
  // On the lease channel.
  void grant(std::int64_t ttl_seconds, Callback<EtcdLease> done);
  void keep_alive(std::int64_t lease, Callback<EtcdLease> done);
  void revoke(std::int64_t lease, Callback<bool> done);

  // Watches [key, range_end) from `start_revision` on (0: from the moment etcd creates it;
  // `on_created` then gets the store's revision at that moment); deletes only when
  // `deletes_only`. `on_events` gets each batch with the store's revision after it. `on_failed`
  // runs once if the watch cannot go on (rejected, or the history it needs was compacted);
  // connection losses are retried (from the revision after the last delivered), not reported.
  // (A watch from the past waits for etcd's catch-up loop, up to 100 ms: a caller that reads
  // and then watches should create the watch from now first, then read.)
  std::unique_ptr<EtcdWatch> watch(std::string key, std::string range_end, std::int64_t start_revision, bool deletes_only,
                                   std::function<void(std::int64_t, std::vector<EtcdEvent>)> on_events,
                                   std::function<void(std::exception_ptr)> on_failed,
                                   std::function<void(std::int64_t)> on_created = {});

  // The local address of the request channel's connection ("" when it is not connected): the
  // address of the interface that reaches etcd.
  std::string local_address() const;
  // The members, as "host:port, host:port" (for messages).
  std::string endpoints_text() const;
  void close();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

class EtcdWatch {
 public:
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;
  void cancel();

  struct State;
  explicit EtcdWatch(std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
};

}  // namespace crun
