#include "store/store_operations.h"

#include <algorithm>
#include <stdexcept>

#include "store/store.h"
#include "store/store_keyspace.h"

namespace crun::store_ops {

namespace {

std::optional<Status> key_too_long(std::string_view key, Writer& reply) {
  if (key.size() <= kMaxKeyLength) return std::nullopt;
  return error(Status::kKeyTooLong,
               "key of " + std::to_string(key.size()) + " bytes exceeds " + std::to_string(kMaxKeyLength), reply);
}

std::optional<Status> value_too_large(std::string_view value, Writer& reply) {
  if (value.size() <= kMaxValueSize) return std::nullopt;
  return error(Status::kValueTooLarge,
               "value of " + std::to_string(value.size()) + " bytes exceeds " + std::to_string(kMaxValueSize), reply);
}

std::string first_missing(const KeySpace& keys, const std::vector<std::string>& names) {
  for (auto& k : names)
    if (!keys.find(k)) return k;
  return {};
}

// A key's value, and its shared bytes when it is large and the reply takes shared values.
struct Found {
  const std::string* value = nullptr;
  std::shared_ptr<const SharedValue> large;
};

Found lookup(const KeySpace& keys, std::string_view key, const SharedValues* shared) {
  Found f;
  f.value = shared != nullptr ? keys.find(key, f.large) : keys.find(key);
  return f;
}

// A found value as a string field of the reply: referenced when it is large, else copied.
void put_value(Found found, Writer& reply, SharedValues* shared) {
  if (!found.large) return reply.str(*found.value);
  reply.u32(static_cast<std::uint32_t>(found.value->size()));
  shared->emplace_back(reply.size(), std::move(found.large));
}

std::string timeout_text(std::uint32_t ms) {
  return ms == wire::kForever ? std::string("forever") : std::to_string(ms) + " ms";
}

}  // namespace

Status error(Status status, std::string_view message, Writer& reply) {
  reply.str(message);
  return status;
}

Status set(KeySpace& keys, std::string_view key, std::string_view value, Writer& reply) {
  if (auto e = key_too_long(key, reply)) return *e;
  if (auto e = value_too_large(value, reply)) return *e;
  keys.set(key, value);
  return Status::kOk;
}

Status set_ephemeral(KeySpace& keys, std::string_view key, std::string_view value, std::uint64_t owner,
                     std::vector<std::string>& owned, Writer& reply) {
  if (auto e = key_too_long(key, reply)) return *e;
  if (auto e = value_too_large(value, reply)) return *e;
  if (std::find(owned.begin(), owned.end(), key) == owned.end()) owned.emplace_back(key);
  keys.set_owned(key, value, owner);
  return Status::kOk;
}

Status multi_set(KeySpace& keys, std::span<const std::pair<std::string_view, std::string_view>> items, Writer& reply) {
  for (auto& [k, v] : items) {
    if (auto e = key_too_long(k, reply)) return *e;
    if (auto e = value_too_large(v, reply)) return *e;
  }
  for (auto& [k, v] : items) keys.set(k, v);
  return Status::kOk;
}

Status add(KeySpace& keys, std::string_view key, std::int64_t delta, Writer& reply) {
  if (auto e = key_too_long(key, reply)) return *e;
  try {
    reply.i64(keys.add(key, delta));
    return Status::kOk;
  } catch (const std::invalid_argument& e) {
    return error(Status::kNotInteger, e.what(), reply);
  }
}

Status compare_set(KeySpace& keys, std::string_view key, std::string_view expected, std::string_view desired,
                   Writer& reply) {
  if (auto e = key_too_long(key, reply)) return *e;
  if (auto e = value_too_large(desired, reply)) return *e;
  reply.str(keys.compare_set(key, expected, desired));
  return Status::kOk;
}

Status append(KeySpace& keys, std::string_view key, std::string_view value, Writer& reply) {
  if (auto e = key_too_long(key, reply)) return *e;
  try {
    reply.i64(keys.append(key, value, kMaxValueSize));
    return Status::kOk;
  } catch (const std::length_error& e) {
    return error(Status::kValueTooLarge, e.what(), reply);
  }
}

Status remove(KeySpace& keys, std::string_view key, Writer& reply) {
  reply.u8(keys.remove(key) ? 1 : 0);
  return Status::kOk;
}

Status check(const KeySpace& keys, const std::vector<std::string>& names, Writer& reply) {
  reply.u8(keys.has_all(names) ? 1 : 0);
  return Status::kOk;
}

Status num_keys(const KeySpace& keys, std::string_view prefix, Writer& reply) {
  reply.i64(keys.count(prefix));
  return Status::kOk;
}

Status list_keys(const KeySpace& keys, std::string_view prefix, std::uint32_t limit, Writer& reply) {
  auto names = keys.list(prefix, std::min<std::size_t>(limit, kMaxKeysPerRequest));
  reply.u32(static_cast<std::uint32_t>(names.size()));
  for (auto& k : names) reply.str(k);
  return Status::kOk;
}

Status try_get(const KeySpace& keys, std::string_view key, Writer& reply, SharedValues* shared) {
  Found found = lookup(keys, key, shared);
  reply.u8(found.value ? 1 : 0);
  if (found.value) {
    put_value(std::move(found), reply, shared);
  } else {
    reply.str(std::string_view());
  }
  return Status::kOk;
}

Status watch(KeySpace& keys, const std::shared_ptr<Watch>& watch, std::size_t watching, std::size_t max_watches,
             Writer& reply) {
  if (auto e = key_too_long(watch->prefix, reply)) return *e;
  if (watching >= max_watches) return error(Status::kTooManyPending, "too many watches on one connection", reply);
  keys.add_watch(watch);
  return Status::kOk;
}

std::optional<Status> read_now(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names,
                               std::uint32_t timeout_ms, Writer& reply, SharedValues* shared) {
  for (auto& k : names)
    if (auto e = key_too_long(k, reply)) return *e;
  if (keys.has_all(names)) return read_ready(keys, op, names, reply, shared);
  if (timeout_ms == 0) {
    return error(Status::kTimeout, "key '" + first_missing(keys, names) + "' not set within 0 ms", reply);
  }
  return std::nullopt;
}

Status read_ready(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names, Writer& reply,
                  SharedValues* shared) {
  if (op == wire::Op::kGet) {
    put_value(lookup(keys, names[0], shared), reply, shared);
  } else if (op == wire::Op::kMultiGet) {
    reply.u32(static_cast<std::uint32_t>(names.size()));
    for (auto& k : names) put_value(lookup(keys, k, shared), reply, shared);
  }  // kWait: an empty payload
  return Status::kOk;
}

Status read_timed_out(const KeySpace& keys, wire::Op op, const std::vector<std::string>& names,
                      std::uint32_t timeout_ms, Writer& reply) {
  return error(Status::kTimeout,
               std::string(wire::op_name(op)) + ": key '" + first_missing(keys, names) + "' not set within " +
                   timeout_text(timeout_ms),
               reply);
}

}  // namespace crun::store_ops
