#include "worker_runtime/gloo_store_adapter.h"

#include <gloo/common/error.h>

namespace crun::rt {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_.set(key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  try {
    std::string v = store_.get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  } catch (const crun::StoreError& e) {
    throw gloo::IoException(std::string("crun store get(") + key + "): " + e.what());
  }
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  try {
    store_.wait(keys, timeout.count() > 0 ? timeout : timeout_);
  } catch (const crun::StoreError& e) {
    throw gloo::IoException(std::string("crun store wait: ") + e.what());
  }
}

}  // namespace crun::rt
