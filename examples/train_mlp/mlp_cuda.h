// CudaMlp: the Mlp of mlp.h on one GPU: cuBLAS GEMMs, small kernels for bias/ReLU/softmax and
// the SGD update, gradients averaged with one NCCL all_reduce(avg) of a flat buffer per step.
//
// Contract
//   Same arithmetic as Mlp (row-major parameters W1, b1, W2, b2), computed on device `device`.
//   from_host()/to_host() move parameters and momentum between the CPU model and the GPU (for
//   init, checkpoints, evaluation and the weights hash). step() runs forward, backward, the
//   gradient average over `pg` (an NCCL process group; the stream is synchronized before the
//   collective is issued) and the momentum SGD update; it returns the batch's mean loss.
//
// Threading
//   One thread; the CUDA device is set on construction and by every step().
#pragma once

#include <memory>
#include <vector>

#include "examples/train_mlp/mlp.h"
#include "worker_runtime/process_group.h"

class CudaMlp {
 public:
  CudaMlp(int dim, int hidden, int classes, int max_batch, int device);
  ~CudaMlp();
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  void from_host(const Mlp& m, const std::vector<std::vector<float>>& momentum);
  void to_host(Mlp& m, std::vector<std::vector<float>>& momentum) const;
  double step(const float* x, const int* y, int batch, crun::rt::ProcessGroup& pg, float lr, float momentum);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
