#include "worker_runtime/op_queue.h"

#include <chrono>

namespace crun::rt {
namespace {

class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> f) : f_(std::move(f)) {}
  void wait() override { f_.get(); }
  bool is_completed() override { return f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  std::shared_future<void> f_;
};

}  // namespace

OpQueue::OpQueue() : thread_([this] { loop(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

WorkPtr OpQueue::submit(std::string name, std::function<void()> op) {
  Item item{std::move(name), std::move(op), {}};
  auto fut = item.done.get_future().share();
  {
    std::lock_guard lk(mu_);
    items_.push_back(std::move(item));
  }
  cv_.notify_one();
  return std::make_shared<FutureWork>(std::move(fut));
}

void OpQueue::loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;
      item = std::move(items_.front());
      items_.pop_front();
    }
    if (!broken_.empty()) {
      item.done.set_exception(std::make_exception_ptr(
          CollectiveError(item.name + ": process group is broken by an earlier failure: " + broken_)));
      continue;
    }
    try {
      item.op();
      item.done.set_value();
    } catch (const std::exception& e) {
      std::string msg = item.name + " failed: " + e.what();
      // Unsupported type/op errors leave the connections intact; everything else breaks them.
      if (dynamic_cast<const CollectiveError*>(&e) == nullptr) broken_ = msg;
      item.done.set_exception(std::make_exception_ptr(CollectiveError(msg)));
    }
  }
}

}  // namespace crun::rt
