// One rank of the all_reduce benchmark (started by run_bench.py with the torchrun environment).
// Usage: bench_allreduce_worker <algo: auto|direct|sliced|ring_chunked|ring|gloo_allreduce|reduce_scatter>
//        <bytes>...
// For each size: 2 warm-up rounds, then `iters` timed all_reduce(sum, float32) calls (with
// `reduce_scatter`: reduce_scatter calls whose input is <bytes>), each preceded by a barrier;
// rank 0 prints "size=<bytes> median_s=<t> busbw_gbs=<x>" (bus bandwidth: all_reduce's formula).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker_runtime/runtime.h"

using namespace crun::rt;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  InitOptions o;
  const std::string algo = argv[1];
  o.gloo.allreduce = algo == "ring" ? GlooOptions::AllreduceAlgo::kRing
                     : algo == "gloo_allreduce" ? GlooOptions::AllreduceAlgo::kGlooAllreduce
                     : algo == "ring_chunked"   ? GlooOptions::AllreduceAlgo::kRingChunked
                     : algo == "direct"         ? GlooOptions::AllreduceAlgo::kDirect
                     : algo == "sliced"         ? GlooOptions::AllreduceAlgo::kSliced
                                                : GlooOptions::AllreduceAlgo::kAuto;
  if (const char* seg = std::getenv("CRUN_BENCH_SEGMENT_BYTES")) o.gloo.segment_bytes = std::stoull(seg);
  if (const char* d = std::getenv("CRUN_BENCH_DIRECT_MAX_BYTES")) o.gloo.direct_max_bytes = std::stoull(d);
  if (const char* m = std::getenv("CRUN_BENCH_MESH_SCRATCH_BYTES")) o.gloo.mesh_scratch_bytes = std::stoull(m);
  auto rt = Runtime::init(o);
  ProcessGroup& pg = rt->pg();
  const int W = pg.size();
  for (int a = 2; a < argc; ++a) {
    const std::size_t bytes = std::stoull(argv[a]);
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> buf(n, 1.0f), slice(n / W);
    const int iters = static_cast<int>(std::clamp<std::size_t>((256u << 20) / bytes, 5, 50));
    auto op = [&] {
      if (algo == "reduce_scatter") {
        pg.reduce_scatter(buf.data(), slice.data(), n / W, DType::kFloat32, ReduceOp::kSum)->wait();
      } else {
        pg.all_reduce(buf.data(), n, DType::kFloat32, ReduceOp::kSum)->wait();
      }
    };
    for (int i = 0; i < 2; ++i) op();
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      if (std::getenv("CRUN_BENCH_FRESH")) buf = std::vector<float>(n, 1.0f);
      if (!std::getenv("CRUN_BENCH_NOBARRIER")) pg.barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      op();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    const double busbw = static_cast<double>(bytes) * 2.0 * (W - 1) / W / med / 1e9;
    if (pg.rank() == 0) {
      std::printf("size=%zu median_s=%.6f busbw_gbs=%.3f iters=%d min_s=%.6f\n", bytes, med, busbw, iters, t.front());
    }
    std::fflush(stdout);
  }
  rt->finish();
  return 0;
}
