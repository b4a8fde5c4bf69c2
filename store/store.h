// Store: the key-value contract that rendezvous, agents and workers share.
//
// Contract
//   - Keys are byte strings up to kMaxKeyLength; values are byte strings up to kMaxValueSize.
//   - set/multi_set overwrite. get/multi_get/wait block until every key exists or the timeout
//     passes (StoreTimeout). add treats a missing key as 0 and stores the decimal result.
//     compare_set swaps only when the current value equals `expected` (a missing key matches an
//     empty `expected`) and returns the value the key holds afterwards.
//     append creates or extends a value and returns its new length.
//   - Failures are exceptions derived from StoreError; each message names the endpoint and reason.
//
// Threading
//   A Store object is not thread-safe unless the implementation says so: give each thread its own
//   client (connections are cheap), or guard one with a mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace crun {

using Millis = std::chrono::milliseconds;

// Limits enforced by the server and checked early by clients (see docs/store-protocol.md).
inline constexpr std::size_t kMaxKeyLength = 4096;
inline constexpr std::size_t kMaxValueSize = 64u << 20;       // 64 MiB
inline constexpr std::size_t kMaxFrameSize = (64u << 20) + (1u << 20);
inline constexpr std::size_t kMaxKeysPerRequest = 65536;

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The operation's deadline passed (a key never came, or the server did not answer in time).
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};
// The connection could not be made or was lost.
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};
// A store server could not listen: its address and port are taken (another server has them).
class StoreAddressInUse : public StoreError {
 public:
  using StoreError::StoreError;
};
// The server refused the request (bad input, limit exceeded, wrong token, not an integer...).
class StoreRejected : public StoreError {
 public:
  StoreRejected(int code, const std::string& what) : StoreError(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(std::string_view key, std::string_view value) = 0;
  virtual std::string get(std::string_view key, Millis timeout) = 0;
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  virtual std::string compare_set(std::string_view key, std::string_view expected,
                                  std::string_view desired) = 0;
  // True when every key exists now; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // True when the key existed.
  virtual bool remove(std::string_view key) = 0;
  // Number of keys that start with `prefix` ("" counts all).
  virtual std::int64_t num_keys(std::string_view prefix = {}) = 0;
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys, Millis timeout) = 0;
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) = 0;
  virtual std::int64_t append(std::string_view key, std::string_view value) = 0;
  // Keys that start with `prefix`, sorted, at most `limit`.
  virtual std::vector<std::string> list_keys(std::string_view prefix, std::size_t limit) = 0;
  // Non-blocking read: nullopt when the key is absent.
  virtual std::optional<std::string> try_get(std::string_view key) = 0;
};

}  // namespace crun
