// ProcessGroup: the collectives a data-parallel worker needs, over one backend (Gloo or NCCL).
//
// Contract
//   - Every rank of the group must issue the same collectives in the same order (as with
//     torch.distributed). Each call enqueues the operation and returns a Work handle at once;
//     wait() blocks until it is done and rethrows its CollectiveError. all_reduce_now is the
//     blocking form (torch's async_op=False): the same operation, in the same issue order, run
//     on the calling thread when nothing is queued before it. all_reduce_sync is all_reduce_now;
//     the other synchronous helpers (broadcast_sync, barrier_sync) are "enqueue, then wait".
//   - Buffers must stay alive and untouched until the Work completes. Gloo takes host memory,
//     NCCL device memory of the group's device.
//   - Every operation has a deadline: `timeout` when given (> 0), else the group's default. A
//     peer that dies or stalls makes the operation fail with CollectiveError within that
//     deadline; after a failure the group is broken and every later operation fails at once.
//   - Layouts: all_gather/gather output holds `count` elements per rank, rank-major. scatter's
//     input (root only) is laid out the same way. reduce_scatter's input holds size()*count
//     elements; rank r receives the reduction of slice r.
//   - send/recv match by (peer, tag) in issue order. They are posted at once and do not queue
//     behind collectives; their Work reports is_completed() only once wait() returned.
//
// Threading
//   Calls may come from one thread at a time (the training thread); operations run in issue
//   order on the group's own thread or the thread that waits for them (Gloo), or on its stream
//   (NCCL). Work handles may be waited from any thread. Destroying the group waits for queued
//   operations to finish or fail.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "worker_runtime/types.h"

namespace crun::rt {

using Millis = std::chrono::milliseconds;

// Handle of one enqueued operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished; throws CollectiveError when it failed.
  virtual void wait() = 0;
  // Non-blocking: true once the operation finished (successfully or not).
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"
  virtual Millis default_timeout() const = 0;

  virtual WorkPtr all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                             Millis timeout = Millis{0}) = 0;
  // Returns once done (throws CollectiveError as wait() would). Nothing is left to overlap with
  // an operation the caller waits for at once; running it on the caller's thread spares two
  // thread hand-offs (Gloo). The default is all_reduce(...)->wait().
  virtual void all_reduce_now(void* data, std::size_t count, DType type, ReduceOp op, Millis timeout = Millis{0}) {
    all_reduce(data, count, type, op, timeout)->wait();
  }
  virtual WorkPtr broadcast(void* data, std::size_t count, DType type, int root,
                            Millis timeout = Millis{0}) = 0;
  // Result lands in `data` on `root`; other ranks' buffers are left as they were.
  virtual WorkPtr reduce(void* data, std::size_t count, DType type, ReduceOp op, int root,
                         Millis timeout = Millis{0}) = 0;
  virtual WorkPtr all_gather(const void* input, void* output, std::size_t count, DType type,
                             Millis timeout = Millis{0}) = 0;
  // `output` is used on root only (may be null elsewhere).
  virtual WorkPtr gather(const void* input, void* output, std::size_t count, DType type, int root,
                         Millis timeout = Millis{0}) = 0;
  // `input` is used on root only (may be null elsewhere).
  virtual WorkPtr scatter(const void* input, void* output, std::size_t count, DType type, int root,
                          Millis timeout = Millis{0}) = 0;
  virtual WorkPtr reduce_scatter(const void* input, void* output, std::size_t count, DType type,
                                 ReduceOp op, Millis timeout = Millis{0}) = 0;
  virtual WorkPtr barrier(Millis timeout = Millis{0}) = 0;
  virtual WorkPtr send(const void* data, std::size_t count, DType type, int dst, std::uint32_t tag = 0,
                       Millis timeout = Millis{0}) = 0;
  virtual WorkPtr recv(void* data, std::size_t count, DType type, int src, std::uint32_t tag = 0,
                       Millis timeout = Millis{0}) = 0;

  // Typed synchronous helpers.
  template <typename T>
  void all_reduce_sync(T* data, std::size_t count, ReduceOp op = ReduceOp::kSum) {
    all_reduce_now(data, count, dtype_of<T>::value, op);
  }
  template <typename T>
  void broadcast_sync(T* data, std::size_t count, int root = 0) {
    broadcast(data, count, dtype_of<T>::value, root)->wait();
  }
  void barrier_sync() { barrier()->wait(); }
};

}  // namespace crun::rt
