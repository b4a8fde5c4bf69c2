// PrefixStore: a view of another Store in which every key is "<prefix>/<key>".
//
// Contract
//   Namespaces keys per job, round or restart so that one round's keys can never be read by the
//   next. num_keys() and list_keys() count only keys under the prefix; returned key names have
//   the prefix removed. Errors are the underlying store's.
//
// Threading
//   Same as the wrapped store; the view holds a reference and must not outlive it.
#pragma once

#include "store/store.h"

namespace crun {

class PrefixStore final : public Store {
 public:
  PrefixStore(Store& base, std::string prefix);
  const std::string& prefix() const { return prefix_; }

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

 private:
  std::string full(std::string_view key) const;
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  Store& base_;
  std::string prefix_;  // ends with '/'
};

}  // namespace crun
