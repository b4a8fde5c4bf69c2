// LoopThread: an Asio event loop run by a thread of its own, for tests that drive objects which
// live on an owner's loop (StoreChannel, RendezvousParticipant) from the test's thread.
// Threading: run() from any thread but the loop's; the destructor from the thread that made it.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <thread>
#include <utility>

namespace crun::test {

class LoopThread {
 public:
  LoopThread() : thread_([this] { io_.run(); }) {}
  ~LoopThread() {
    busy_.reset();
    io_.stop();
    thread_.join();
  }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  boost::asio::io_context& io() { return io_; }

  // Runs `fn` on the loop's thread and waits for it: what it returns, or what it threw.
  template <typename F>
  auto run(F&& fn) -> decltype(fn()) {
    // Shared with the loop: it may still be inside the task when get() returns.
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::forward<F>(fn));
    auto result = task->get_future();
    boost::asio::post(io_, [task] { (*task)(); });
    return result.get();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> busy_ = boost::asio::make_work_guard(io_);
  std::thread thread_;
};

}  // namespace crun::test
