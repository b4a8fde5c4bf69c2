#include "store/prefix_store.h"

namespace crun {

PrefixStore::PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {
  if (prefix_.empty() || prefix_.back() != '/') prefix_ += '/';
}

std::string PrefixStore::full(std::string_view key) const { return prefix_ + std::string(key); }

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(std::string_view key, std::string_view value) { base_.set(full(key), value); }
std::string PrefixStore::get(std::string_view key, Millis timeout) { return base_.get(full(key), timeout); }
std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) { return base_.add(full(key), delta); }
std::string PrefixStore::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  return base_.compare_set(full(key), expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_.check(full(keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) { base_.wait(full(keys), timeout); }
bool PrefixStore::remove(std::string_view key) { return base_.remove(full(key)); }
std::int64_t PrefixStore::num_keys(std::string_view prefix) { return base_.num_keys(full(prefix)); }
std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys, Millis timeout) {
  return base_.multi_get(full(keys), timeout);
}
void PrefixStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  base_.multi_set(full(keys), values);
}
std::int64_t PrefixStore::append(std::string_view key, std::string_view value) { return base_.append(full(key), value); }
std::vector<std::string> PrefixStore::list_keys(std::string_view prefix, std::size_t limit) {
  auto keys = base_.list_keys(full(prefix), limit);
  for (auto& k : keys) k.erase(0, prefix_.size());
  return keys;
}
std::optional<std::string> PrefixStore::try_get(std::string_view key) { return base_.try_get(full(key)); }

}  // namespace crun
