// crun-precheck: the pre-flight check the agent runs as the workers of the group's first start
// under --precheck (docs/operations.md, "Pre-flight check").
//
// Contract
//   - Run as a native worker, with the workers' exact environment: crun::rt::Runtime brings up the
//     process group (Gloo on CPU, NCCL on GPU: backend "auto"), its store keys under a prefix of
//     their own ("//crun/precheck/", never the workers' "//worker/attempt_<N>/").
//   - Each rank times a fixed fp32 matmul (--size N, --repeat K or CRUN_PRECHECK_REPEAT; 256 x 40,
//     about 0.2 s on one core of a laptop-class CPU; 4096 x 40 on a GPU), passes a barrier, times a 4 MiB
//     all_reduce three times. When the group is NCCL (a CUDA build on a GPU) both run on the
//     rank's device, LOCAL_RANK as the runtime numbers it: cuBLAS's SGEMM, synchronized before the
//     clock is read, and a device buffer (precheck/gpu_compute.h); otherwise the CPU matmul
//     below, one core per rank, and a host buffer. Every rank's compute time and GROUP_RANK are
//     shared (an all_reduce of a vector that is zero but in its own slots, on the CPU group), and
//     every rank computes the same verdict
//     (precheck/precheck_verdict.h) with --slowdown X.
//   - Each local rank 0 writes the verdict as one JSON line to $CRUN_PRECHECK_RESULT (when set); on
//     a slow node it also calls crun::rt::request_exclude_node(reason). Exit 0 then; any error: one
//     line on stderr and exit 1.
//
// Threading
//   One thread.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "precheck/precheck_verdict.h"
#ifdef CRUN_PRECHECK_WITH_CUDA
#include "precheck/gpu_compute.h"
#endif
#include "worker_runtime/control.h"
#include "worker_runtime/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

// The GPU's default matmul side: 4096^3 x 2 flops a call, milliseconds on a current GPU, so the
// time is the device's work, not the launch latency that a 256 x 256 SGEMM would measure.
constexpr int kGpuSize = 4096;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// C = A x B, n x n, fp32, the i-k-j order; `repeat` times. Returns a checksum so it is not elided.
float matmul(int n, int repeat) {
  std::vector<float> a(static_cast<std::size_t>(n) * n), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  float sum = 0;
  for (int r = 0; r < repeat; ++r) {
    std::fill(c.begin(), c.end(), 0.0f);
    for (int i = 0; i < n; ++i) {
      float* ci = &c[static_cast<std::size_t>(i) * n];
      for (int k = 0; k < n; ++k) {
        const float aik = a[static_cast<std::size_t>(i) * n + k];
        const float* bk = &b[static_cast<std::size_t>(k) * n];
        for (int j = 0; j < n; ++j) ci[j] += aik * bk[j];
      }
    }
    sum += c[static_cast<std::size_t>(r % n) * n];
  }
  return sum;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  double slowdown = 2.0;
  int size = 0;  // 0: 256 on the CPU, kGpuSize on a GPU
  int repeat = 40;
  if (const int r = env_int("CRUN_PRECHECK_REPEAT", 0); r >= 1 && r <= 100000) repeat = r;  // the compute part's length
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    char* end = nullptr;
    const double value = std::strtod(argv[i + 1], &end);
    if (end == argv[i + 1] || *end != '\0') {
      std::fprintf(stderr, "crun-precheck: %s: not a number: '%s'\n", flag.c_str(), argv[i + 1]);
      return 2;
    }
    if (flag == "--slowdown" && value > 1) slowdown = value;
    else if (flag == "--size" && value >= 1 && value <= 8192) size = static_cast<int>(value);
    else if (flag == "--repeat" && value >= 1 && value <= 100000) repeat = static_cast<int>(value);
    else {
      std::fprintf(stderr, "crun-precheck: bad argument %s %s (--slowdown X > 1, --size N, --repeat K)\n", flag.c_str(), argv[i + 1]);
      return 2;
    }
  }
  try {
    crun::rt::InitOptions options;
    options.backend = "auto";
    options.timeout = crun::rt::Millis{120000};
    options.key_prefix = "//crun/precheck/";
    auto rt = crun::rt::Runtime::init(options);
    const int rank = rt->rank();
    const int world = rt->world_size();
    const int group_rank = env_int("GROUP_RANK", 0);
    rt->heartbeat(0);  // under --initial-heartbeat-timeout the precheck is a worker as any other

#ifdef CRUN_PRECHECK_WITH_CUDA
    const bool on_gpu = rt->pg().backend() == "nccl";
    const int device = rt->env().local_rank;  // the NCCL group's device
#else
    const bool on_gpu = false;  // no NCCL group without CUDA
#endif
    double compute = 0;
    if (size == 0) size = on_gpu ? kGpuSize : 256;
    if (on_gpu) {
#ifdef CRUN_PRECHECK_WITH_CUDA
      compute = crun::precheck::time_gpu_sgemm(device, size, repeat);
      if (device == 0) std::fprintf(stderr, "crun-precheck: compute part on CUDA device 0 (cuBLAS SGEMM), one device per local rank\n");
#endif
    } else {
      const auto t0 = Clock::now();
      volatile float keep = matmul(size, repeat);
      (void)keep;
      compute = seconds_since(t0);
    }
    rt->heartbeat(1);

    rt->pg().barrier()->wait();
    constexpr std::size_t kBlock = std::size_t{1} << 20;  // 1 Mi floats: 4 MiB
    std::vector<float> host_block;
    float* block = nullptr;
#ifdef CRUN_PRECHECK_WITH_CUDA
    std::unique_ptr<crun::precheck::DeviceFloats> device_block;
    if (on_gpu) {
      device_block = std::make_unique<crun::precheck::DeviceFloats>(device, kBlock, 1.0f);
      block = device_block->data();
    }
#endif
    if (!on_gpu) {
      host_block.assign(kBlock, 1.0f);
      block = host_block.data();
    }
    const auto t1 = Clock::now();
    for (int i = 0; i < 3; ++i) rt->pg().all_reduce_now(block, kBlock, crun::rt::DType::kFloat32, crun::rt::ReduceOp::kSum);
    const double allreduce = seconds_since(t1);

    // Every rank's node and compute time, on every rank.
    std::vector<double> shared(static_cast<std::size_t>(2 * world), 0.0);
    shared[static_cast<std::size_t>(rank)] = group_rank;
    shared[static_cast<std::size_t>(world + rank)] = compute;
    rt->cpu_pg().all_reduce_now(shared.data(), shared.size(), crun::rt::DType::kFloat64, crun::rt::ReduceOp::kSum);
    std::vector<crun::precheck::RankTime> times;
    for (int r = 0; r < world; ++r) {
      times.push_back({static_cast<int>(shared[static_cast<std::size_t>(r)]), shared[static_cast<std::size_t>(world + r)]});
    }
    const auto verdict = crun::precheck::judge_precheck(times, slowdown);
    rt->finish();

    if (rt->env().local_rank == 0) {
      if (const char* path = std::getenv("CRUN_PRECHECK_RESULT"); path != nullptr && *path != '\0') {
        std::ofstream out(path, std::ios::trunc);
        out << crun::precheck::verdict_json(verdict, group_rank, allreduce) << "\n";
        if (!out.flush()) std::fprintf(stderr, "crun-precheck: cannot write %s\n", path);
      }
      if (verdict.is_slow(group_rank)) crun::rt::request_exclude_node(crun::precheck::slow_reason(verdict, group_rank));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crun-precheck: %s\n", e.what());
    return 1;
  }
}
