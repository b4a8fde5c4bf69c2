// NCCL backend of ProcessGroup: GPU collectives on device LOCAL_RANK.
//
// Contract
//   - nccl_available(): built with CUDA+NCCL and at least one CUDA device is visible; when it is
//     false, nccl_unavailable_reason() says why (no CUDA at build time, no driver, no device).
//   - make_nccl_process_group(): rank 0 creates the ncclUniqueId and publishes it under store
//     key "nccl/unique_id"; the others read it (deadline `timeout`). The communicator is created
//     with ncclCommInitRankConfig(config.blocking = 0) and polled with ncclCommGetAsyncError
//     until ready or the deadline, then ncclCommAbort + InitError. Throws InitError when
//     NCCL is unavailable.
//   - Buffers are device pointers on the group's device. Each operation is enqueued on the
//     group's own stream, which does not wait for the caller's streams: make the input ready
//     first (e.g. cudaStreamSynchronize on the producing stream). wait() polls the operation's CUDA event and ncclCommGetAsyncError until
//     done or the deadline; on error or timeout it calls ncclCommAbort and throws
//     CollectiveError, so a dead peer never hangs the worker. avg uses ncclAvg.
//     dtypes: float32, float64, int32, int64, float16, bfloat16, uint8 (data movement).
//
// Threading
//   As ProcessGroup. The CUDA device is set on the calling thread by every operation.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"
#include "worker_runtime/process_group.h"

namespace crun::rt {

bool nccl_available();
std::string nccl_unavailable_reason();

std::unique_ptr<ProcessGroup> make_nccl_process_group(crun::Store& store, int rank, int size, int device,
                                                      Millis timeout);

}  // namespace crun::rt
