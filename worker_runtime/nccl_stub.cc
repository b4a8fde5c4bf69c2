// Built when crun is configured without CUDA/NCCL: the NCCL backend reports why it is absent.
#include "worker_runtime/nccl_process_group.h"

namespace crun::rt {

bool nccl_available() { return false; }
std::string nccl_unavailable_reason() { return "crun was built without CUDA/NCCL (CRUN_WITH_CUDA=OFF)"; }

std::unique_ptr<ProcessGroup> make_nccl_process_group(crun::Store&, int, int, int, Millis) {
  throw InitError("nccl backend requested but " + nccl_unavailable_reason());
}

}  // namespace crun::rt
