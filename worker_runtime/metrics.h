// Metric reduction for distributed evaluation: per-rank partial sums (loss, correct, total...)
// summed onto rank `root`.
//
// Contract
//   reduce_sum_to_root() returns the element-wise sum over all ranks on `root` and this rank's
//   own values elsewhere. float64 sums, so counts stay exact up to 2^53. Every rank must call it
//   with the same number of values. EvalMetrics is the common (loss_sum, correct, total) triple.
//
// Threading
//   Same as the ProcessGroup it uses.
#pragma once

#include <vector>

#include "worker_runtime/process_group.h"

namespace crun::rt {

std::vector<double> reduce_sum_to_root(ProcessGroup& pg, std::vector<double> values, int root = 0);

struct EvalMetrics {
  double loss_sum = 0;
  double correct = 0;
  double total = 0;
  double accuracy() const { return total > 0 ? correct / total : 0.0; }
  double mean_loss() const { return total > 0 ? loss_sum / total : 0.0; }
};

// Sums every rank's metrics onto `root` (other ranks get their own values back).
EvalMetrics reduce_metrics(ProcessGroup& pg, const EvalMetrics& local, int root = 0);

}  // namespace crun::rt
