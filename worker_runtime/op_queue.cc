// OpQueue. See op_queue.h for the contract.
#include "worker_runtime/op_queue.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

namespace crun::rt {

namespace {

struct Op {
  std::string name;
  std::function<void()> fn;
  bool done = false;
  std::exception_ptr error;
};

}  // namespace

struct OpQueue::Core {
  std::mutex mu;
  std::condition_variable work_cv;  // the queue's thread: an operation can start, or stop
  std::condition_variable done_cv;  // waiters: an operation finished
  std::deque<std::shared_ptr<Op>> pending;
  bool running = false;  // some thread is running an operation
  bool stopping = false;
  std::string broken;  // first failure

  // Runs the front operation on this thread. Called with `lk` held and !running.
  void run_front(std::unique_lock<std::mutex>& lk) {
    std::shared_ptr<Op> op = std::move(pending.front());
    pending.pop_front();
    if (!broken.empty()) {
      op->error = std::make_exception_ptr(
          CollectiveError(op->name + ": process group is broken by an earlier failure: " + broken));
    } else {
      running = true;
      lk.unlock();
      std::string failure;
      bool breaks = false;
      try {
        op->fn();
      } catch (const std::exception& e) {
        failure = op->name + " failed: " + e.what();
        // Unsupported type/op errors leave the connections intact; everything else breaks them.
        breaks = dynamic_cast<const CollectiveError*>(&e) == nullptr;
      } catch (...) {
        failure = op->name + " failed: unknown exception";
        breaks = true;
      }
      std::function<void()>().swap(op->fn);  // release what the operation captured, unlocked
      lk.lock();
      running = false;
      if (!failure.empty()) {
        op->error = std::make_exception_ptr(CollectiveError(failure));
        if (breaks && broken.empty()) broken = failure;
      }
    }
    op->done = true;
    done_cv.notify_all();
    if (!pending.empty()) work_cv.notify_one();
  }

  // Until `op` is done: runs pending operations when nobody else is, else sleeps.
  void drive(std::unique_lock<std::mutex>& lk, const Op& op) {
    while (!op.done) {
      if (!running && !pending.empty()) {
        run_front(lk);
      } else {
        done_cv.wait(lk);
      }
    }
  }

  void wait_for(const Op& op) {
    std::unique_lock lk(mu);
    drive(lk, op);
    if (op.error) std::rethrow_exception(op.error);
  }

  void loop() {
    std::unique_lock lk(mu);
    for (;;) {
      work_cv.wait(lk, [&] { return !running && (!pending.empty() || stopping); });
      if (pending.empty()) return;  // stopping, and nothing left
      run_front(lk);
    }
  }
};

namespace {

class QueueWork final : public Work {
 public:
  QueueWork(std::shared_ptr<OpQueue::Core> core, std::shared_ptr<Op> op) : core_(std::move(core)), op_(std::move(op)) {}
  void wait() override { core_->wait_for(*op_); }
  bool is_completed() override {
    std::lock_guard lk(core_->mu);
    return op_->done;
  }

 private:
  std::shared_ptr<OpQueue::Core> core_;
  std::shared_ptr<Op> op_;
};

}  // namespace

OpQueue::OpQueue(bool inline_only) : core_(std::make_shared<Core>()) {
  if (!inline_only) thread_ = std::thread([core = core_] { core->loop(); });
}

OpQueue::~OpQueue() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(core_->mu);
    core_->stopping = true;
  }
  core_->work_cv.notify_all();
  thread_.join();
}

void OpQueue::run(std::string name, std::function<void()> fn) {
  auto op = std::make_shared<Op>();
  op->name = std::move(name);
  op->fn = std::move(fn);
  std::unique_lock lk(core_->mu);
  core_->pending.push_back(op);  // in issue order; the queue's thread is not woken for it
  core_->drive(lk, *op);
  if (op->error) std::rethrow_exception(op->error);
}

WorkPtr OpQueue::submit(std::string name, std::function<void()> fn) {
  auto op = std::make_shared<Op>();
  op->name = std::move(name);
  op->fn = std::move(fn);
  bool wake = false;
  {
    std::lock_guard lk(core_->mu);
    core_->pending.push_back(op);
    wake = !core_->running;  // a running operation's end wakes the thread anyway
  }
  auto work = std::make_shared<QueueWork>(core_, op);
  if (!thread_.joinable()) {
    std::unique_lock lk(core_->mu);
    core_->drive(lk, *op);  // inline_only
  } else if (wake) {
    core_->work_cv.notify_one();
  }
  return work;
}

}  // namespace crun::rt
