// NCCL backend test. Without a usable GPU it prints why and exits 77 (CTest SKIP_RETURN_CODE).
// With GPUs it starts one rank per visible device (1..4) through proc_harness, running
// `nccl_test --worker`: all_reduce (sum/avg/max), broadcast, all_gather, reduce_scatter and
// barrier on device buffers, float32 and bfloat16, checked against host references; then
// train_mlp --device cuda, from the build tree or from `--train-mlp PATH` (a build carried
// elsewhere, as scripts/gpu-check.sh does).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/proc_harness.h"
#include "worker_runtime/nccl_process_group.h"
#include "worker_runtime/runtime.h"

using namespace crun::rt;

namespace {

int worker() {
  InitOptions o;
  o.backend = "nccl";
  o.timeout = Millis(60000);
  auto rt = Runtime::init(o);
  ProcessGroup& pg = rt->pg();
  const int R = pg.rank(), W = pg.size();
  const std::size_t n = 1 << 16;
  int bad = 0;
  float* d = nullptr;
  cudaMalloc(&d, n * W * sizeof(float));
  std::vector<float> h(n * W);
  auto up = [&](std::size_t count) { cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice); };
  auto down = [&](std::size_t count) { cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost); };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(R + 1 + i % 3);
    up(n);
    pg.all_reduce(d, n, DType::kFloat32, op)->wait();
    down(n);
    for (std::size_t i = 0; i < n; ++i) {
      double want = op == ReduceOp::kMax ? W + i % 3 : W * (W + 1) / 2.0 + W * static_cast<double>(i % 3);
      if (op == ReduceOp::kAvg) want /= W;
      if (std::fabs(h[i] - want) > 1e-4) { ++bad; break; }
    }
  }
  for (std::size_t i = 0; i < n; ++i) h[i] = R == 0 ? 7.0f : 0.0f;
  up(n);
  pg.broadcast(d, n, DType::kFloat32, 0)->wait();
  down(n);
  if (h[n - 1] != 7.0f) ++bad;
  float* out = nullptr;
  cudaMalloc(&out, n * W * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(R);
  up(n);
  pg.all_gather(d, out, n, DType::kFloat32)->wait();
  cudaMemcpy(h.data(), out, n * W * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < W; ++r) if (h[r * n] != static_cast<float>(r)) ++bad;
  for (std::size_t i = 0; i < n * W; ++i) h[i] = 1.0f;
  up(n * W);
  pg.reduce_scatter(d, out, n, DType::kFloat32, ReduceOp::kSum)->wait();
  cudaMemcpy(h.data(), out, sizeof(float), cudaMemcpyDeviceToHost);
  if (h[0] != static_cast<float>(W)) ++bad;
  std::vector<std::uint16_t> hb(n, float_to_bf16(1.0f));
  cudaMemcpy(d, hb.data(), n * 2, cudaMemcpyHostToDevice);
  pg.all_reduce(d, n, DType::kBFloat16, ReduceOp::kSum)->wait();
  cudaMemcpy(hb.data(), d, n * 2, cudaMemcpyDeviceToHost);
  if (bf16_to_float(hb[0]) != static_cast<float>(W)) ++bad;
  pg.barrier()->wait();
  cudaFree(d);
  cudaFree(out);
  std::printf(bad ? "FAIL nccl (%d checks)\n" : "PASS nccl\n", bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
    try {
      return worker();
    } catch (const std::exception& e) {
      std::printf("FAIL nccl: %s\n", e.what());
      return 1;
    }
  }
  if (!nccl_available()) {
    std::printf("SKIP: NCCL tests not run: %s\n", nccl_unavailable_reason().c_str());
    return 77;
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  const int world = devices < 4 ? devices : 4;
  auto res = crun::test::run_ranks({argv[0], "--worker"}, world, {}, std::chrono::seconds(120));
  std::printf("%s", res.summary().c_str());
  bool ok = !res.timed_out;
  for (auto& r : res.ranks) ok = ok && r.exit_code == 0;
  std::printf("%s collectives (world size %d)\n", ok ? "PASS" : "FAIL", world);
#ifdef CRUN_TRAIN_MLP
  const char* train_mlp = argc > 2 && std::strcmp(argv[1], "--train-mlp") == 0 ? argv[2] : CRUN_TRAIN_MLP;
  // The CUDA path of train_mlp (cuBLAS + NCCL) must train as well as the CPU path.
  auto train = crun::test::run_ranks({train_mlp, "--device", "cuda"}, world, {}, std::chrono::seconds(120));
  std::printf("%s", train.summary().c_str());
  const auto pos = train.ranks[0].output.find("final: accuracy=");
  const bool trained = !train.timed_out && train.ranks[0].exit_code == 0 && pos != std::string::npos &&
                       std::stod(train.ranks[0].output.substr(pos + 16)) >= 0.95;
  std::printf("%s train_mlp --device cuda\n", trained ? "PASS" : "FAIL");
  ok = ok && trained;
#endif
  return ok ? 0 : 1;
}
