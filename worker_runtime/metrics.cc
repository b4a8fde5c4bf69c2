#include "worker_runtime/metrics.h"

namespace crun::rt {

std::vector<double> reduce_sum_to_root(ProcessGroup& pg, std::vector<double> values, int root) {
  pg.reduce(values.data(), values.size(), DType::kFloat64, ReduceOp::kSum, root)->wait();
  return values;
}

EvalMetrics reduce_metrics(ProcessGroup& pg, const EvalMetrics& local, int root) {
  auto v = reduce_sum_to_root(pg, {local.loss_sum, local.correct, local.total}, root);
  return {v[0], v[1], v[2]};
}

}  // namespace crun::rt
