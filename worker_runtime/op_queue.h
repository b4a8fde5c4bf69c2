// OpQueue (internal): runs submitted operations one by one, in order, on its own thread, and
// hands back a Work per operation.
//
// Contract
//   - submit() never blocks on the operation; the Work's wait() rethrows what the operation
//     threw, converted to CollectiveError prefixed with the operation's name.
//   - After an operation fails the queue is "broken": later operations fail at once with the
//     first failure's reason (a Gloo context is unusable after an I/O error).
//   - The destructor lets queued operations run (each is bounded by its own deadline), then joins.
//
// Threading
//   submit() from any thread; operations run on the queue's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "worker_runtime/process_group.h"

namespace crun::rt {

class OpQueue {
 public:
  OpQueue();
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  WorkPtr submit(std::string name, std::function<void()> op);

 private:
  void loop();
  struct Item {
    std::string name;
    std::function<void()> op;
    std::promise<void> done;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stopping_ = false;
  std::string broken_;  // first failure; only touched by the queue thread
  std::thread thread_;
};

}  // namespace crun::rt
