#include "store/store_keyspace.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace crun {

namespace {
template <typename T>
void erase_one(std::vector<std::shared_ptr<T>>& v, const std::shared_ptr<T>& item) {
  auto it = std::find(v.begin(), v.end(), item);
  if (it != v.end()) {
    *it = std::move(v.back());
    v.pop_back();
  }
}

bool parse_int64(const std::string& s, std::int64_t& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}
}  // namespace

const std::string* KeySpace::find(std::string_view key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second.bytes();
}

const std::string* KeySpace::find(std::string_view key, std::shared_ptr<const SharedValue>& shared) const {
  auto it = data_.find(key);
  if (it == data_.end()) return nullptr;
  if (it->second.shared) shared = it->second.shared;
  return &it->second.bytes();
}

// In place while nothing else references the shared bytes (their room is reused); else new bytes.
void KeySpace::Value::assign(std::string_view value) {
  if (value.size() < SharedValue::kShareFrom) {
    shared.reset();
    inline_bytes.assign(value);
    return;
  }
  if (!shared || shared.use_count() > 1) shared = std::make_shared<SharedValue>();
  shared->bytes.assign(value);
  std::string().swap(inline_bytes);
}

void KeySpace::Value::append(std::string_view more) {
  const std::string& now = bytes();
  if (now.size() + more.size() < SharedValue::kShareFrom) {
    inline_bytes.append(more);
    return;
  }
  if (shared && shared.use_count() == 1) {
    shared->bytes.append(more);
    return;
  }
  auto grown = std::make_shared<SharedValue>();
  grown->bytes.reserve(now.size() + more.size());
  grown->bytes.append(now).append(more);
  shared = std::move(grown);
  std::string().swap(inline_bytes);
}

bool KeySpace::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

KeySpace::Value& KeySpace::slot(std::string_view key) {
  auto it = data_.find(key);
  if (it == data_.end()) it = data_.emplace(std::string(key), Value()).first;
  return it->second;
}

void KeySpace::check_not_notifying(const char* what) const {
  if (notifying_ != 0) throw std::logic_error(std::string("KeySpace::") + what + " called from inside a notification");
}

void KeySpace::set(std::string_view key, std::string_view value) {
  check_not_notifying("set");
  disown(key);
  Value& v = slot(key);
  v.assign(value);
  changed(std::string(key), &v.bytes());
}

void KeySpace::set_owned(std::string_view key, std::string_view value, std::uint64_t owner) {
  check_not_notifying("set_owned");
  owners_[std::string(key)] = owner;
  Value& v = slot(key);
  v.assign(value);
  changed(std::string(key), &v.bytes());
}

void KeySpace::release(std::uint64_t owner, std::vector<std::string> keys) {
  if (keys.empty()) return;
  if (notifying_ != 0) {
    deferred_releases_.emplace_back(owner, std::move(keys));
    return;
  }
  release_now(owner, keys);
}

void KeySpace::release_now(std::uint64_t owner, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    auto it = owners_.find(k);
    if (it == owners_.end() || it->second != owner) continue;
    owners_.erase(it);
    remove(k);
  }
}

std::int64_t KeySpace::add(std::string_view key, std::int64_t delta) {
  check_not_notifying("add");
  std::int64_t current = 0;
  if (const std::string* v = find(key); v != nullptr && !parse_int64(*v, current)) {
    throw std::invalid_argument("value of '" + std::string(key) + "' is not a decimal integer");
  }
  std::int64_t result = static_cast<std::int64_t>(static_cast<std::uint64_t>(current) + static_cast<std::uint64_t>(delta));
  disown(key);
  Value& v = slot(key);
  v.assign(std::to_string(result));
  changed(std::string(key), &v.bytes());
  return result;
}

std::string KeySpace::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  check_not_notifying("compare_set");
  auto it = data_.find(key);
  bool matches = (it == data_.end()) ? expected.empty() : it->second.bytes() == expected;
  if (!matches) return it == data_.end() ? std::string() : it->second.bytes();
  disown(key);
  Value& v = slot(key);
  v.assign(desired);
  changed(std::string(key), &v.bytes());
  return v.bytes();
}

std::int64_t KeySpace::append(std::string_view key, std::string_view value, std::size_t max_value) {
  check_not_notifying("append");
  auto it = data_.find(key);
  std::size_t current = it == data_.end() ? 0 : it->second.bytes().size();
  if (current + value.size() > max_value) {
    throw std::length_error("appending to '" + std::string(key) + "' would exceed " + std::to_string(max_value) + " bytes");
  }
  disown(key);
  Value& v = slot(key);
  v.append(value);
  changed(std::string(key), &v.bytes());
  return static_cast<std::int64_t>(v.bytes().size());
}

bool KeySpace::remove(std::string_view key) {
  check_not_notifying("remove");
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  std::string name = it->first;
  data_.erase(it);
  disown(name);
  changed(name, nullptr);
  return true;
}

std::int64_t KeySpace::count(std::string_view prefix) const {
  if (prefix.empty()) return static_cast<std::int64_t>(data_.size());
  std::int64_t n = 0;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.starts_with(prefix); ++it) ++n;
  return n;
}

std::vector<std::string> KeySpace::list(std::string_view prefix, std::size_t limit) const {
  std::vector<std::string> out;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && out.size() < limit && it->first.starts_with(prefix); ++it) {
    out.push_back(it->first);
  }
  return out;
}

void KeySpace::park(const std::shared_ptr<ParkedRequest>& request) {
  check_not_notifying("park");
  for (const std::string& k : request->keys) {
    if (data_.count(k) == 0) {
      auto& waiting = parked_[k];
      if (std::find(waiting.begin(), waiting.end(), request) == waiting.end()) waiting.push_back(request);
    }
  }
}

void KeySpace::unpark(const std::shared_ptr<ParkedRequest>& request) {
  for (const std::string& k : request->keys) {
    auto it = parked_.find(k);
    if (it == parked_.end()) continue;
    erase_one(it->second, request);
    if (it->second.empty()) parked_.erase(it);
  }
}

void KeySpace::add_watch(const std::shared_ptr<Watch>& watch) {
  check_not_notifying("add_watch");
  watches_[watch->prefix].push_back(watch);
  ++watched_lengths_[watch->prefix.size()];
}

void KeySpace::remove_watch(const std::shared_ptr<Watch>& watch) {
  if (watch->removed) return;
  watch->removed = true;
  auto it = watches_.find(watch->prefix);
  if (it == watches_.end()) return;
  erase_one(it->second, watch);
  if (it->second.empty()) watches_.erase(it);
  if (--watched_lengths_[watch->prefix.size()] == 0) watched_lengths_.erase(watch->prefix.size());
}

void KeySpace::changed(const std::string& key, const std::string* value) {
  notify(key, value);
  if (notifying_ != 0) return;
  // Releases requested by callbacks (connections that closed while being notified) run now,
  // when no callback holds a value any more; each may notify in turn and defer more.
  while (!deferred_releases_.empty()) {
    auto [owner, keys] = std::move(deferred_releases_.front());
    deferred_releases_.erase(deferred_releases_.begin());
    release_now(owner, keys);
  }
}

void KeySpace::notify(const std::string& key, const std::string* value) {
  struct Depth {
    int& n;
    explicit Depth(int& d) : n(d) { ++n; }
    ~Depth() { --n; }
  } depth(notifying_);
  if (value != nullptr) {
    if (auto it = parked_.find(key); it != parked_.end()) {
      std::vector<std::shared_ptr<ParkedRequest>> waiting = std::move(it->second);
      parked_.erase(it);
      std::vector<std::shared_ptr<ParkedRequest>> still;
      for (auto& request : waiting) {
        if (request->done) continue;
        if (has_all(request->keys)) {
          request->done = true;
          unpark(request);  // from the other keys it waited on
          request->ready();
        } else {
          still.push_back(std::move(request));
        }
      }
      for (auto& request : still) {
        if (!request->done) parked_[key].push_back(std::move(request));  // unparked meanwhile: dropped
      }
    }
  }
  if (!watched_lengths_.empty()) {
    std::uint8_t kind = value != nullptr ? 1 : 2;
    // Collect first: a callback may remove watches (a closing connection); removed ones are skipped.
    std::vector<std::shared_ptr<Watch>> hit;
    for (auto [len, n] : watched_lengths_) {
      if (len > key.size()) break;
      auto it = watches_.find(key.substr(0, len));
      if (it != watches_.end()) hit.insert(hit.end(), it->second.begin(), it->second.end());
    }
    for (auto& w : hit) {
      if (!w->removed) w->changed(kind, key, value);
    }
  }
}

}  // namespace crun
