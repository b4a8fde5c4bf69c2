#include "worker_runtime/bucketer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace crun::rt {

GradBucketer::GradBucketer(ProcessGroup& pg, std::vector<std::span<float>> grads, std::size_t bucket_bytes)
    : pg_(pg), grads_(std::move(grads)), where_(grads_.size()), ready_(grads_.size(), false) {
  std::size_t bytes = 0;
  for (std::size_t k = grads_.size(); k-- > 0;) {
    if (buckets_.empty() || bytes >= bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    where_[k] = {buckets_.size() - 1, b.flat.size()};
    b.flat.resize(b.flat.size() + grads_[k].size());
    b.params.push_back(k);
    ++b.pending;
    bytes += grads_[k].size() * sizeof(float);
  }
}

void GradBucketer::mark_ready(std::size_t i) {
  if (i >= grads_.size()) throw std::out_of_range("GradBucketer: parameter " + std::to_string(i));
  if (ready_[i]) throw std::logic_error("GradBucketer: parameter " + std::to_string(i) + " marked ready twice");
  ready_[i] = true;
  Bucket& b = buckets_[where_[i].bucket];
  std::copy(grads_[i].begin(), grads_[i].end(), b.flat.begin() + static_cast<std::ptrdiff_t>(where_[i].offset));
  --b.pending;
  launch_ready();
}

void GradBucketer::launch_ready() {
  // The last bucket waits for wait_all() (bucketer.h).
  while (next_launch_ + 1 < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = pg_.all_reduce(b.flat.data(), b.flat.size(), DType::kFloat32, ReduceOp::kAvg);
  }
}

void GradBucketer::wait_all() {
  if (buckets_.empty()) return;  // no parameters
  if (next_launch_ + 1 != buckets_.size() || buckets_.back().pending != 0) {
    throw std::logic_error("GradBucketer: wait_all() before every gradient was marked ready");
  }
  Bucket& last = buckets_.back();
  pg_.all_reduce_now(last.flat.data(), last.flat.size(), DType::kFloat32, ReduceOp::kAvg);
  for (std::size_t i = 0; i + 1 < buckets_.size(); ++i) {
    WorkPtr w = std::move(buckets_[i].work);
    w->wait();
  }
  for (std::size_t k = 0; k < grads_.size(); ++k) {
    const Bucket& b = buckets_[where_[k].bucket];
    auto first = b.flat.begin() + static_cast<std::ptrdiff_t>(where_[k].offset);
    std::copy(first, first + static_cast<std::ptrdiff_t>(grads_[k].size()), grads_[k].begin());
  }
  for (auto& b : buckets_) b.pending = b.params.size();
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

}  // namespace crun::rt
