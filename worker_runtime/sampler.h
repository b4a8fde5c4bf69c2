// DistributedSampler: which dataset indices this rank visits in an epoch, as
// torch.utils.data.DistributedSampler computes them.
//
// Contract (same arithmetic as torch/utils/data/distributed.py)
//   - num_samples = ceil((N - R) / R) when drop_last and N % R != 0, else ceil(N / R);
//     total_size = num_samples * R.
//   - shuffle: a permutation of [0, N) seeded with seed + epoch; otherwise 0..N-1.
//     Permutation source: Fisher-Yates driven by std::mt19937_64(seed + epoch) with our own
//     uniform draw (multiply-shift with rejection). torch uses torch.randperm with a
//     torch.Generator, which cannot be reproduced bit-for-bit outside torch, so the ORDER differs
//     from torch's; the padding, truncation and striding rules are identical.
//   - not drop_last: pad to total_size by repeating indices from the start (repeating the whole
//     list as often as needed); drop_last: truncate to total_size.
//   - this rank gets indices[rank : total_size : R].
//   - Every rank must use the same seed and epoch; set_epoch() before each epoch.
//
// Threading
//   A value type; not shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace crun::rt {

class DistributedSampler {
 public:
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);

  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }
  std::uint64_t epoch() const { return epoch_; }
  std::size_t num_samples() const { return num_samples_; }
  std::size_t total_size() const { return total_size_; }
  // This rank's indices for the current epoch (num_samples() of them).
  std::vector<std::size_t> indices() const;

 private:
  std::size_t n_;
  int replicas_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::uint64_t epoch_ = 0;
  std::size_t num_samples_;
  std::size_t total_size_;
};

}  // namespace crun::rt
