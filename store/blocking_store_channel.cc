#include "store/blocking_store_channel.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>
#include <utility>

#include "base/quiet_thread.h"
#include "store/store_channel.h"
#include "store/store_connection.h"

namespace crun {

namespace asio = boost::asio;

struct BlockingStoreChannel::Impl {
  asio::io_context loop;
  asio::executor_work_guard<asio::io_context::executor_type> busy = asio::make_work_guard(loop);
  std::unique_ptr<StoreChannel> channel;  // made here before the loop runs; destroyed on the loop
  std::thread thread;

  // Starts one request on the loop and waits for what its callback hands the promise (shared
  // with the callback: it may still be inside set_value when this returns).
  template <typename T, typename Start>
  T call(Start start) {
    auto promise = std::make_shared<std::promise<T>>();
    auto result = promise->get_future();
    asio::post(loop, [&] { start(*channel, promise); });
    return result.get();
  }
};

namespace {
// A callback that completes `promise` with the value, or with the error.
template <typename T>
using Promise = std::shared_ptr<std::promise<T>>;

template <typename T>
auto fulfil(Promise<T> promise) {
  return [promise](std::exception_ptr e, T value) {
    if (e) return promise->set_exception(e);
    promise->set_value(std::move(value));
  };
}

auto fulfil_void(Promise<void> promise) {
  return [promise](std::exception_ptr e) {
    if (e) return promise->set_exception(e);
    promise->set_value();
  };
}
}  // namespace

BlockingStoreChannel::BlockingStoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                                           std::function<void(const std::string& why)> on_lost)
    : impl_(std::make_unique<Impl>()) {
  impl_->channel = std::make_unique<StoreChannel>(impl_->loop, nullptr, endpoint, options, std::move(on_lost));
  impl_->thread = quiet_thread([impl = impl_.get()] { impl->loop.run(); });
}

BlockingStoreChannel::~BlockingStoreChannel() {
  asio::post(impl_->loop, [impl = impl_.get()] {
    impl->channel.reset();
    impl->busy.reset();
    impl->loop.stop();
  });
  impl_->thread.join();
}

void BlockingStoreChannel::set(const std::string& key, std::string_view value, Clock::time_point deadline) {
  impl_->call<void>([&](StoreChannel& ch, Promise<void> p) { ch.set(key, value, deadline, fulfil_void(p)); });
}

std::string BlockingStoreChannel::get(const std::string& key, Millis wait, Clock::time_point deadline) {
  return *impl_->call<std::optional<std::string>>([&](StoreChannel& ch, Promise<std::optional<std::string>> p) {
    ch.get(key, wait, deadline, fulfil(p));
  });
}

std::optional<std::string> BlockingStoreChannel::try_get(const std::string& key, Clock::time_point deadline) {
  return impl_->call<std::optional<std::string>>([&](StoreChannel& ch, Promise<std::optional<std::string>> p) {
    ch.try_get(key, deadline, fulfil(p));
  });
}

std::vector<std::string> BlockingStoreChannel::list_keys(const std::string& prefix, std::uint32_t limit,
                                                         Clock::time_point deadline) {
  return impl_->call<std::vector<std::string>>([&](StoreChannel& ch, Promise<std::vector<std::string>> p) {
    ch.list_keys(prefix, limit, deadline, fulfil(p));
  });
}

void BlockingStoreChannel::watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event,
                                 Clock::time_point deadline) {
  impl_->call<void>([&](StoreChannel& ch, Promise<void> p) {
    ch.watch(prefix, std::move(on_event), deadline, fulfil_void(p));
  });
}

}  // namespace crun
