// KeySpace: the store server's data, its parked (blocking) requests and its watches.
//
// Contract
//   - Holds key → value in key order, so prefix counts and listings are range scans.
//   - A value of SharedValue::kShareFrom bytes or more is held as a SharedValue (shared_value.h):
//     find(key, shared) hands out a reference that keeps those bytes, unchanged, after the key is
//     written again or deleted; a write never changes bytes that a reference still holds.
//   - A ParkedRequest waits for a set of keys: ready() is called exactly once, from inside the
//     mutation that made the last of its keys exist, unless unpark() removed it first.
//   - A Watch sees every set/delete of a key starting with its prefix, after the mutation.
//     Watches are indexed by prefix length, so a mutation costs O(distinct watched lengths),
//     not O(watches).
//   - Callbacks (ready(), changed()) run synchronously inside the mutation and see a stable
//     keyspace: the value they are passed stays valid for the whole notification. From inside a
//     callback, release(), unpark() and remove_watch() may be called (a connection closing while
//     it is being notified): release() is then deferred until the outermost notification ends,
//     and a removed watch or finished request is not called again. Any other mutator called from
//     a callback throws std::logic_error.
//   - No networking and no clocks: the server owns sockets and timers.
//
// Threading
//   Not thread-safe; the server uses it from its one event-loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/shared_value.h"

namespace crun {

class ParkedRequest {
 public:
  virtual ~ParkedRequest() = default;
  std::vector<std::string> keys;
  bool done = false;
  virtual void ready() = 0;
};

class Watch {
 public:
  virtual ~Watch() = default;
  std::string prefix;
  bool removed = false;  // set by remove_watch(): no further calls
  // kind: 1 set, 2 delete (wire values); value is nullptr on delete.
  virtual void changed(std::uint8_t kind, const std::string& key, const std::string* value) = 0;
};

class KeySpace {
 public:
  const std::string* find(std::string_view key) const;
  // find(), also setting `shared` to the value's shared bytes when it is held so (else unchanged).
  const std::string* find(std::string_view key, std::shared_ptr<const SharedValue>& shared) const;
  bool has_all(const std::vector<std::string>& keys) const;

  void set(std::string_view key, std::string_view value);
  // An ephemeral set: the key belongs to `owner` until another write takes it over;
  // release(owner) deletes the keys the owner still holds (its connection closed).
  void set_owned(std::string_view key, std::string_view value, std::uint64_t owner);
  // Deferred while a notification is running (see the contract).
  void release(std::uint64_t owner, std::vector<std::string> keys);
  // Throws std::invalid_argument when the present value is not a decimal int64.
  std::int64_t add(std::string_view key, std::int64_t delta);
  std::string compare_set(std::string_view key, std::string_view expected, std::string_view desired);
  // Returns the new length; throws std::length_error when it would exceed `max_value`.
  std::int64_t append(std::string_view key, std::string_view value, std::size_t max_value);
  bool remove(std::string_view key);
  std::int64_t count(std::string_view prefix) const;
  std::vector<std::string> list(std::string_view prefix, std::size_t limit) const;
  std::size_t size() const { return data_.size(); }

  // Parks `request` on every key it still misses (the caller checked has_all first).
  void park(const std::shared_ptr<ParkedRequest>& request);
  void unpark(const std::shared_ptr<ParkedRequest>& request);
  std::size_t parked_keys() const { return parked_.size(); }

  void add_watch(const std::shared_ptr<Watch>& watch);
  void remove_watch(const std::shared_ptr<Watch>& watch);

  // True while callbacks of a mutation are running.
  bool notifying() const { return notifying_ != 0; }

 private:
  // Small values inline, large ones shared (SharedValue::kShareFrom).
  struct Value {
    std::string inline_bytes;
    std::shared_ptr<SharedValue> shared;
    const std::string& bytes() const { return shared ? shared->bytes : inline_bytes; }
    void assign(std::string_view value);
    void append(std::string_view more);
  };

  void check_not_notifying(const char* what) const;
  void release_now(std::uint64_t owner, const std::vector<std::string>& keys);
  Value& slot(std::string_view key);
  void disown(std::string_view key) {
    if (!owners_.empty()) owners_.erase(std::string(key));
  }
  void changed(const std::string& key, const std::string* value);  // notify, then deferred releases
  void notify(const std::string& key, const std::string* value);

  std::map<std::string, Value, std::less<>> data_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<ParkedRequest>>> parked_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Watch>>> watches_;
  std::map<std::size_t, std::size_t> watched_lengths_;  // prefix length → number of watches
  std::unordered_map<std::string, std::uint64_t> owners_;  // ephemeral key → owning connection
  int notifying_ = 0;  // depth of running notifications
  std::vector<std::pair<std::uint64_t, std::vector<std::string>>> deferred_releases_;
};

}  // namespace crun
