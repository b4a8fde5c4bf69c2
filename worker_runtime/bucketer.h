// GradBucketer: DDP-style gradient averaging in ~25 MB buckets that start all-reducing while the
// rest of backward still runs.
//
// Contract
//   - Parameters are given in forward (definition) order; buckets are filled in REVERSE order
//     (the order backward produces gradients), each closed once it reaches `bucket_bytes`.
//   - mark_ready(i) says gradient i is final for this step: its values are copied into the
//     bucket's flat buffer at once (the caller may reuse the gradient memory). When every
//     gradient of a bucket is ready the bucket is launched as an async all_reduce(avg); buckets
//     launch strictly in bucket order so every rank issues the same collectives in the same order
//     whatever order its gradients became ready in. The last bucket is the exception: it is
//     all-reduced by wait_all() itself, on the calling thread (all_reduce_now): once backward has
//     made every gradient nothing is left to overlap with it, and handing it to the group's
//     thread and back costs two thread switches a step.
//   - wait_all() (before the optimizer step) all-reduces the last bucket, waits for the others,
//     writes the averaged values back into the gradient buffers and resets for the next step.
//     Every gradient must have been marked ready (std::logic_error otherwise); collective
//     failures surface as CollectiveError.
//   - Averaging is deterministic for a fixed world size (every all_reduce path reduces in an
//     order fixed by the world size and the bucket's length).
//
// Threading
//   One thread (the training thread) calls mark_ready/wait_all.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "worker_runtime/process_group.h"

namespace crun::rt {

class GradBucketer {
 public:
  static constexpr std::size_t kDefaultBucketBytes = 25u << 20;

  GradBucketer(ProcessGroup& pg, std::vector<std::span<float>> grads, std::size_t bucket_bytes = kDefaultBucketBytes);

  void mark_ready(std::size_t param_index);
  void wait_all();

  std::size_t num_buckets() const { return buckets_.size(); }
  std::size_t bucket_of(std::size_t param_index) const { return where_[param_index].bucket; }

 private:
  struct Bucket {
    std::vector<float> flat;
    std::vector<std::size_t> params;
    std::size_t pending = 0;
    WorkPtr work;
  };
  struct Where {
    std::size_t bucket = 0;
    std::size_t offset = 0;
  };
  void launch_ready();

  ProcessGroup& pg_;
  std::vector<std::span<float>> grads_;
  std::vector<Bucket> buckets_;
  std::vector<Where> where_;
  std::vector<bool> ready_;
  std::size_t next_launch_ = 0;
};

}  // namespace crun::rt
