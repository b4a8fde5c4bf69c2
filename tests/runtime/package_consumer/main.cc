// Links only the installed crun::runtime; runs as a single process (no torchrun variables).
#include <cstdio>
#include <vector>

#include "worker_runtime/runtime.h"
#include "worker_runtime/sampler.h"

int main() {
  auto rt = crun::rt::Runtime::init();
  std::vector<double> v{1.5, 2.5};
  rt->pg().all_reduce_sync(v.data(), v.size());
  crun::rt::DistributedSampler s(10, 1, 0, false);
  std::printf("consumer ok: world=%d sum=%.1f samples=%zu\n", rt->world_size(), v[0] + v[1], s.num_samples());
  return 0;
}
