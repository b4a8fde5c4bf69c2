// Store operations: each request of crun's store protocol as one function over a KeySpace.
//
// Contract
//   - A function takes one request's decoded arguments, applies it to the KeySpace, appends the
//     reply's payload (what follows status and request id on the wire, docs/store-protocol.md) to
//     `reply` and returns the reply's status. An error status comes with a one-line message as
//     its payload and leaves the KeySpace unchanged. Operations that store, wait or watch check
//     sizes before anything else: a key (or prefix) over kMaxKeyLength is kKeyTooLong, a value
//     over kMaxValueSize kValueTooLarge. Lookups (check, delete, num_keys, list_keys, try_get)
//     take any key.
//   - No sockets, frames or clocks. What belongs to a connection is passed in: its ephemeral
//     keys (set_ephemeral), its number of watches and their limit (watch). Parking a blocking
//     read, its limit and its timeout stay with StoreSession, which decodes the frames and
//     calls these.
//   - Reads that answer with stored values (get, multi_get, try_get) may be given `shared`: a large
//     value (shared_value.h) is then not copied into `reply`; its length is, and the value goes to
//     `shared` with the payload offset its bytes belong at. Without it every value is copied.
//   - Mutations run the KeySpace's callbacks synchronously (store_keyspace.h); a function writes
//     to `reply` only before it mutates (an error) or after the mutation returned, never while
//     those callbacks run.
//
// Threading
//   The thread that owns the KeySpace (the server's event-loop thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store_protocol.h"

namespace crun {
class KeySpace;
class Watch;
struct SharedValue;
}  // namespace crun

namespace crun::store_ops {

using wire::Status;
using wire::Writer;

// Large values of a reply, each with the offset in its payload where its bytes belong.
using SharedValues = std::vector<std::pair<std::size_t, std::shared_ptr<const SharedValue>>>;

Status set(KeySpace& keys, std::string_view key, std::string_view value, Writer& reply);
// A set whose key `owner` holds until another write takes it over; the key joins `owned` (the
// connection's ephemeral keys, once each), which the connection hands to KeySpace::release().
Status set_ephemeral(KeySpace& keys, std::string_view key, std::string_view value, std::uint64_t owner,
                     std::vector<std::string>& owned, Writer& reply);
Status multi_set(KeySpace& keys, std::span<const std::pair<std::string_view, std::string_view>> items, Writer& reply);
Status add(KeySpace& keys, std::string_view key, std::int64_t delta, Writer& reply);
Status compare_set(KeySpace& keys, std::string_view key, std::string_view expected, std::string_view desired,
                   Writer& reply);
Status append(KeySpace& keys, std::string_view key, std::string_view value, Writer& reply);
Status remove(KeySpace& keys, std::string_view key, Writer& reply);  // the delete operation
Status check(const KeySpace& keys, const std::vector<std::string>& names, Writer& reply);
Status num_keys(const KeySpace& keys, std::string_view prefix, Writer& reply);
Status list_keys(const KeySpace& keys, std::string_view prefix, std::uint32_t limit, Writer& reply);
Status try_get(const KeySpace& keys, std::string_view key, Writer& reply, SharedValues* shared = nullptr);

// Registers `watch` (its prefix set) unless the prefix is too long or the connection already has
// `max_watches` watches; the connection keeps `watch` only when this returns kOk.
Status watch(KeySpace& keys, const std::shared_ptr<Watch>& watch, std::size_t watching, std::size_t max_watches,
             Writer& reply);

// The blocking reads: `op` is kGet (one key), kWait or kMultiGet.
// Answers when it can now: every key is set, a key is too long, or timeout_ms is 0 and a key is
// missing (kTimeout). std::nullopt, with nothing written: the read must wait for its keys.
std::optional<Status> read_now(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names,
                               std::uint32_t timeout_ms, Writer& reply, SharedValues* shared = nullptr);
// The answer to a read whose keys are all set (one that waited, once the KeySpace said ready).
Status read_ready(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names, Writer& reply,
                  SharedValues* shared = nullptr);
// The answer to a read whose timeout passed first.
Status read_timed_out(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names,
                      std::uint32_t timeout_ms, Writer& reply);

// An error reply: `message` as the payload, `status` returned.
Status error(Status status, std::string_view message, Writer& reply);

}  // namespace crun::store_ops
