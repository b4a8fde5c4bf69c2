// GlooStoreAdapter (internal, not installed): crun::Store seen as gloo::rendezvous::Store.
//
// Contract
//   get() and wait() block until the keys exist or `timeout` passes (then throw
//   gloo::IoException naming the key), so a missing peer fails Gloo's rendezvous instead of
//   hanging. Values are copied byte for byte.
//
// Threading
//   Same as the wrapped store (one thread at a time).
#pragma once

#include <chrono>
#include <gloo/rendezvous/store.h>

#include "store/store.h"

namespace crun::rt {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(crun::Store& store, std::chrono::milliseconds timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  crun::Store& store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace crun::rt
