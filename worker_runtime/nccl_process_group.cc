// NCCL backend (built only when CRUN_WITH_CUDA). See nccl_process_group.h for the contract.
#include "worker_runtime/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace crun::rt {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kUInt8: return ncclUint8;
  }
  throw CollectiveError("unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProd: return ncclProd;
  }
  throw CollectiveError("unknown reduce op");
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CollectiveError(std::string("nccl backend: ") + what + ": " + cudaGetErrorString(e));
}

// Shared state of one communicator; Work objects keep it alive.
struct Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  std::atomic<bool> aborted{false};
  std::string abort_reason;

  void abort(const std::string& reason) {
    bool expected = false;
    if (aborted.compare_exchange_strong(expected, true)) {
      abort_reason = reason;
      ncclCommAbort(comm);
    }
  }
  // Waits until a non-blocking NCCL call completes (ncclInProgress -> ncclSuccess) or fails.
  void settle(ncclResult_t r, const std::string& what, Clock::time_point deadline) {
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        abort(what + " timed out");
        throw CollectiveError(what + ": timed out; communicator aborted");
      }
      std::this_thread::yield();
      ncclCommGetAsyncError(comm, &r);
    }
    if (r != ncclSuccess) {
      const std::string msg = what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(comm) + ")";
      abort(msg);
      throw CollectiveError(msg + "; communicator aborted");
    }
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> c, cudaEvent_t ev, std::string name, Clock::time_point deadline)
      : c_(std::move(c)), ev_(ev), name_(std::move(name)), deadline_(deadline) {}
  ~NcclWork() override { cudaEventDestroy(ev_); }
  void wait() override {
    for (;;) {
      if (is_completed()) break;
      ncclResult_t r = ncclSuccess;
      ncclCommGetAsyncError(c_->comm, &r);
      if (r != ncclSuccess && r != ncclInProgress) c_->settle(r, name_, deadline_);
      if (Clock::now() > deadline_) {
        c_->abort(name_ + " timed out");
        throw CollectiveError(name_ + ": timed out; communicator aborted (a peer is gone or stalled)");
      }
      std::this_thread::yield();
    }
    if (c_->aborted) throw CollectiveError(name_ + ": communicator aborted: " + c_->abort_reason);
  }
  bool is_completed() override {
    cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaEventQuery");
    return true;
  }

 private:
  std::shared_ptr<Comm> c_;
  cudaEvent_t ev_;
  std::string name_;
  Clock::time_point deadline_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Comm> c, int rank, int size, Millis timeout)
      : c_(std::move(c)), rank_(rank), size_(size), timeout_(timeout) {
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
  }
  ~NcclProcessGroup() override {
    if (!c_->aborted) {
      cudaStreamSynchronize(c_->stream);
      ncclCommDestroy(c_->comm);
    }
    cudaFree(scratch_);
    cudaStreamDestroy(c_->stream);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Millis default_timeout() const override { return timeout_; }

  WorkPtr all_reduce(void* data, std::size_t count, DType type, ReduceOp op, Millis timeout) override {
    return run("all_reduce", timeout, [&] {
      return ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), c_->comm, c_->stream);
    });
  }
  WorkPtr broadcast(void* data, std::size_t count, DType type, int root, Millis timeout) override {
    return run("broadcast", timeout, [&] {
      return ncclBroadcast(data, data, count, nccl_type(type), root, c_->comm, c_->stream);
    });
  }
  WorkPtr reduce(void* data, std::size_t count, DType type, ReduceOp op, int root, Millis timeout) override {
    return run("reduce", timeout, [&] {
      return ncclReduce(data, data, count, nccl_type(type), nccl_op(op), root, c_->comm, c_->stream);
    });
  }
  WorkPtr all_gather(const void* input, void* output, std::size_t count, DType type, Millis timeout) override {
    return run("all_gather", timeout, [&] {
      return ncclAllGather(input, output, count, nccl_type(type), c_->comm, c_->stream);
    });
  }
  WorkPtr gather(const void* input, void* output, std::size_t count, DType type, int root, Millis timeout) override {
    const std::size_t bytes = count * dtype_size(type);
    return run("gather", timeout, [&] {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      if (rank_ == root) {
        for (int p = 0; p < size_; ++p) {
          if (p == rank_) {
            cudaMemcpyAsync(static_cast<char*>(output) + p * bytes, input, bytes, cudaMemcpyDeviceToDevice, c_->stream);
          } else {
            ncclRecv(static_cast<char*>(output) + p * bytes, count, nccl_type(type), p, c_->comm, c_->stream);
          }
        }
      } else {
        ncclSend(input, count, nccl_type(type), root, c_->comm, c_->stream);
      }
      return ncclGroupEnd();
    });
  }
  WorkPtr scatter(const void* input, void* output, std::size_t count, DType type, int root, Millis timeout) override {
    const std::size_t bytes = count * dtype_size(type);
    return run("scatter", timeout, [&] {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      if (rank_ == root) {
        for (int p = 0; p < size_; ++p) {
          const char* src = static_cast<const char*>(input) + p * bytes;
          if (p == rank_) {
            cudaMemcpyAsync(output, src, bytes, cudaMemcpyDeviceToDevice, c_->stream);
          } else {
            ncclSend(src, count, nccl_type(type), p, c_->comm, c_->stream);
          }
        }
      } else {
        ncclRecv(output, count, nccl_type(type), root, c_->comm, c_->stream);
      }
      return ncclGroupEnd();
    });
  }
  WorkPtr reduce_scatter(const void* input, void* output, std::size_t count, DType type, ReduceOp op,
                         Millis timeout) override {
    return run("reduce_scatter", timeout, [&] {
      return ncclReduceScatter(input, output, count, nccl_type(type), nccl_op(op), c_->comm, c_->stream);
    });
  }
  WorkPtr barrier(Millis timeout) override {
    return run("barrier", timeout, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, c_->comm, c_->stream);
    });
  }
  WorkPtr send(const void* data, std::size_t count, DType type, int dst, std::uint32_t, Millis timeout) override {
    return run("send", timeout, [&] { return ncclSend(data, count, nccl_type(type), dst, c_->comm, c_->stream); });
  }
  WorkPtr recv(void* data, std::size_t count, DType type, int src, std::uint32_t, Millis timeout) override {
    return run("recv", timeout, [&] { return ncclRecv(data, count, nccl_type(type), src, c_->comm, c_->stream); });
  }

 private:
  template <typename F>
  WorkPtr run(const char* op, Millis timeout, F&& enqueue) {
    const std::string name = std::string("nccl ") + op;
    if (c_->aborted) throw CollectiveError(name + ": communicator aborted earlier: " + c_->abort_reason);
    const auto deadline = Clock::now() + (timeout.count() > 0 ? timeout : timeout_);
    cuda_check(cudaSetDevice(c_->device), "cudaSetDevice");
    c_->settle(enqueue(), name, deadline);
    cudaEvent_t ev = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ev, c_->stream), "cudaEventRecord");
    return std::make_shared<NcclWork>(c_, ev, name, deadline);
  }

  std::shared_ptr<Comm> c_;
  int rank_;
  int size_;
  Millis timeout_;
  void* scratch_ = nullptr;
};

}  // namespace

std::string nccl_unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device is visible";
  return "";
}

bool nccl_available() { return nccl_unavailable_reason().empty(); }

std::unique_ptr<ProcessGroup> make_nccl_process_group(crun::Store& store, int rank, int size, int device,
                                                      Millis timeout) {
  if (!nccl_available()) throw InitError("nccl backend: " + nccl_unavailable_reason());
  const auto deadline = Clock::now() + timeout;
  auto c = std::make_shared<Comm>();
  c->device = device;
  cuda_check(cudaSetDevice(device), "cudaSetDevice(LOCAL_RANK)");
  ncclUniqueId id;
  try {
    if (rank == 0) {
      if (ncclGetUniqueId(&id) != ncclSuccess) throw InitError("ncclGetUniqueId failed");
      store.set("nccl/unique_id", std::string_view(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      std::string v = store.get("nccl/unique_id", timeout);
      if (v.size() != sizeof id) throw InitError("nccl/unique_id in the store has the wrong size");
      std::memcpy(&id, v.data(), sizeof id);
    }
  } catch (const crun::StoreError& e) {
    throw InitError(std::string("nccl backend: exchanging the unique id failed: ") + e.what());
  }
  cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->comm, size, id, rank, &config);
  try {
    c->settle(r, "ncclCommInitRankConfig(rank " + std::to_string(rank) + " of " + std::to_string(size) + ")",
              deadline);
  } catch (const CollectiveError& e) {
    cudaStreamDestroy(c->stream);
    throw InitError(e.what());
  }
  return std::make_unique<NcclProcessGroup>(std::move(c), rank, size, timeout);
}

}  // namespace crun::rt
