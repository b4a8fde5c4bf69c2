// OpQueue (internal): runs submitted operations one at a time, in submission order, and hands
// back a Work per operation. An operation runs on the queue's own thread, or on the thread that
// waits for it when that thread gets there first (see Threading).
//
// Contract
//   - submit() never blocks on the operation (except with `inline_only`, below); the Work's
//     wait() rethrows what the operation threw, converted to CollectiveError prefixed with the
//     operation's name.
//   - After an operation fails the queue is "broken": later operations fail at once with the
//     first failure's reason (a connection is unusable after an I/O error). A CollectiveError
//     thrown by an operation (unsupported type or op) does not break it.
//   - `inline_only` (for groups whose operations never wait on a peer: world size 1): no thread;
//     submit() runs the operation before returning.
//   - run() is submit() followed by wait(), without waking the queue's thread: an operation its
//     caller waits for at once needs no hand-off.
//   - The destructor lets queued operations run (each is bounded by its own deadline), then
//     joins. A Work may outlive its queue.
//
// Threading
//   submit() from any thread. Operations never overlap and always run in submission order. A
//   thread in wait() whose operation has not started runs the pending operations itself, up to
//   and including its own, instead of sleeping until the queue's thread has run them, so
//   "launch, then wait at once" usually costs no hand-off (the queue's thread may still get
//   there first). The queue's thread is woken at submit so that an operation nobody waits for
//   yet still progresses in the background.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "worker_runtime/process_group.h"

namespace crun::rt {

class OpQueue {
 public:
  explicit OpQueue(bool inline_only = false);
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  WorkPtr submit(std::string name, std::function<void()> op);
  // The operation after those submitted before it, on the calling thread unless the queue's
  // thread takes it first (it is not woken for it); returns when done, throws as wait() would.
  void run(std::string name, std::function<void()> op);

  struct Core;  // state shared with the Work handles (op_queue.cc)

 private:
  std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace crun::rt
