// Worker program for the multi-process runtime tests: `rt_worker <scenario>`, started by
// proc_harness with the torchrun environment. Prints "PASS <scenario>" and exits 0 on success;
// prints what differed and exits 1 otherwise.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/heartbeat_file.h"
#include "worker_runtime/bucketer.h"
#include "worker_runtime/checkpoint.h"
#include "worker_runtime/metrics.h"
#include "worker_runtime/runtime.h"

using namespace crun::rt;

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
  ++failures;
}

// Host values of each dtype, as doubles.
struct Buf {
  DType t;
  std::vector<std::uint8_t> bytes;
  Buf(DType type, std::size_t n) : t(type), bytes(n * dtype_size(type)) {}
  std::size_t size() const { return bytes.size() / dtype_size(t); }
  void* data() { return bytes.data(); }
  void set(std::size_t i, double v) {
    switch (t) {
      case DType::kFloat32: reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v); break;
      case DType::kFloat64: reinterpret_cast<double*>(bytes.data())[i] = v; break;
      case DType::kInt32: reinterpret_cast<std::int32_t*>(bytes.data())[i] = static_cast<std::int32_t>(v); break;
      case DType::kInt64: reinterpret_cast<std::int64_t*>(bytes.data())[i] = static_cast<std::int64_t>(v); break;
      case DType::kFloat16: reinterpret_cast<std::uint16_t*>(bytes.data())[i] = float_to_half(static_cast<float>(v)); break;
      case DType::kBFloat16: reinterpret_cast<std::uint16_t*>(bytes.data())[i] = float_to_bf16(static_cast<float>(v)); break;
      case DType::kUInt8: bytes[i] = static_cast<std::uint8_t>(v); break;
    }
  }
  double get(std::size_t i) const {
    switch (t) {
      case DType::kFloat32: return reinterpret_cast<const float*>(bytes.data())[i];
      case DType::kFloat64: return reinterpret_cast<const double*>(bytes.data())[i];
      case DType::kInt32: return reinterpret_cast<const std::int32_t*>(bytes.data())[i];
      case DType::kInt64: return static_cast<double>(reinterpret_cast<const std::int64_t*>(bytes.data())[i]);
      case DType::kFloat16: return half_to_float(reinterpret_cast<const std::uint16_t*>(bytes.data())[i]);
      case DType::kBFloat16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(bytes.data())[i]);
      case DType::kUInt8: return bytes[i];
    }
    return 0;
  }
};

// Small integers so that every dtype (fp16, bf16 included) represents inputs and results exactly.
double value(int rank, std::size_t i) { return (rank + 1) + static_cast<double>(i % 3); }

double reference(ReduceOp op, int world, std::size_t i, DType t) {
  double acc = value(0, i);
  for (int r = 1; r < world; ++r) {
    double v = value(r, i);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    acc = (t == DType::kInt32 || t == DType::kInt64) ? std::trunc(acc / world) : acc / world;
  }
  return acc;
}

bool close(double got, double want, DType t) {
  const double tol = (t == DType::kFloat16 || t == DType::kBFloat16) ? 1e-2 : 1e-9;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

void expect_buf(const Buf& b, const std::function<double(std::size_t)>& want, const std::string& what) {
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (!close(b.get(i), want(i), b.t)) {
      fail(what + " element " + std::to_string(i) + ": got " + std::to_string(b.get(i)) + " want " +
           std::to_string(want(i)));
      return;
    }
  }
}

void collectives(Runtime& rt) {
  ProcessGroup& pg = rt.pg();
  const int W = pg.size(), R = pg.rank();
  const DType types[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};
  for (DType t : types) {
    const std::string tn = dtype_name(t);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}, std::size_t{300007}}) {
      for (ReduceOp op : ops) {
        Buf b(t, n);
        for (std::size_t i = 0; i < n; ++i) b.set(i, value(R, i));
        const auto t0 = std::chrono::steady_clock::now();
        pg.all_reduce(b.data(), n, t, op)->wait();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (secs > 0.5) std::printf("slow: all_reduce %s %s n=%zu took %.2fs\n", tn.c_str(), reduce_op_name(op), n, secs);
        expect_buf(b, [&](std::size_t i) { return reference(op, W, i, t); },
                   "all_reduce " + tn + " " + reduce_op_name(op) + " n=" + std::to_string(n));
      }
    }
    // Explicit timeout: the per-operation-deadline path (gloo::allreduce) must agree.
    {
      Buf b(t, 1000);
      for (std::size_t i = 0; i < 1000; ++i) b.set(i, value(R, i));
      pg.all_reduce(b.data(), 1000, t, ReduceOp::kSum, Millis(20000))->wait();
      expect_buf(b, [&](std::size_t i) { return reference(ReduceOp::kSum, W, i, t); }, "all_reduce(timeout) " + tn);
    }
    const std::size_t n = 13;
    const int root = W - 1;
    {  // broadcast
      Buf b(t, n);
      for (std::size_t i = 0; i < n; ++i) b.set(i, R == root ? value(root, i) : 0);
      pg.broadcast(b.data(), n, t, root)->wait();
      expect_buf(b, [&](std::size_t i) { return value(root, i); }, "broadcast " + tn);
    }
    for (ReduceOp op : ops) {  // reduce
      Buf b(t, n);
      for (std::size_t i = 0; i < n; ++i) b.set(i, value(R, i));
      pg.reduce(b.data(), n, t, op, root)->wait();
      if (R == root) {
        expect_buf(b, [&](std::size_t i) { return reference(op, W, i, t); }, "reduce " + tn + " " + reduce_op_name(op));
      } else {
        expect_buf(b, [&](std::size_t i) { return value(R, i); }, "reduce leaves non-root " + tn);
      }
    }
    {  // all_gather
      Buf in(t, n), out(t, n * W);
      for (std::size_t i = 0; i < n; ++i) in.set(i, value(R, i));
      pg.all_gather(in.data(), out.data(), n, t)->wait();
      expect_buf(out, [&](std::size_t i) { return value(static_cast<int>(i / n), i % n); }, "all_gather " + tn);
    }
    {  // gather to 0
      Buf in(t, n), out(t, n * W);
      for (std::size_t i = 0; i < n; ++i) in.set(i, value(R, i));
      pg.gather(in.data(), R == 0 ? out.data() : nullptr, n, t, 0)->wait();
      if (R == 0) expect_buf(out, [&](std::size_t i) { return value(static_cast<int>(i / n), i % n); }, "gather " + tn);
    }
    {  // scatter from root
      Buf in(t, n * W), out(t, n);
      for (std::size_t i = 0; i < n * W; ++i) in.set(i, value(static_cast<int>(i / n), i % n) + 1);
      pg.scatter(R == root ? in.data() : nullptr, out.data(), n, t, root)->wait();
      expect_buf(out, [&](std::size_t i) { return value(R, i) + 1; }, "scatter " + tn);
    }
    for (std::size_t m : {n, std::size_t{5003}}) {  // reduce_scatter (sum): slice r of everybody's input, summed
      Buf in(t, m * W), out(t, m);
      for (std::size_t i = 0; i < m * W; ++i) in.set(i, value(R, i));
      pg.reduce_scatter(in.data(), out.data(), m, t, ReduceOp::kSum)->wait();
      expect_buf(out, [&](std::size_t i) { return reference(ReduceOp::kSum, W, R * m + i, t); },
                 "reduce_scatter " + tn + " count=" + std::to_string(m));
    }
    if (W > 1) {  // send/recv: rank 0 -> last -> rank 0
      const int last = W - 1;
      Buf b(t, n);
      if (R == 0) {
        for (std::size_t i = 0; i < n; ++i) b.set(i, value(0, i));
        pg.send(b.data(), n, t, last, 5)->wait();
        Buf back(t, n);
        pg.recv(back.data(), n, t, last, 6)->wait();
        expect_buf(back, [&](std::size_t i) { return value(0, i) + 1; }, "send/recv " + tn);
      } else if (R == last) {
        pg.recv(b.data(), n, t, 0, 5)->wait();
        for (std::size_t i = 0; i < n; ++i) b.set(i, b.get(i) + 1);
        pg.send(b.data(), n, t, 0, 6)->wait();
      }
    }
    pg.barrier()->wait();
  }
  // uint8 moves data but is refused by reductions, without breaking the group.
  {
    std::vector<std::uint8_t> b(5, static_cast<std::uint8_t>(R == 0 ? 42 : 0));
    pg.broadcast(b.data(), b.size(), DType::kUInt8, 0)->wait();
    if (b[4] != 42) fail("broadcast uint8");
    bool threw = false;
    try {
      pg.all_reduce(b.data(), b.size(), DType::kUInt8, ReduceOp::kSum)->wait();
    } catch (const CollectiveError&) {
      threw = true;
    }
    if (!threw) fail("all_reduce uint8 did not throw");
    pg.barrier()->wait();
  }
  // Async: several operations in flight, waited in reverse order.
  {
    std::vector<std::vector<float>> bufs(4, std::vector<float>(1000, static_cast<float>(R + 1)));
    std::vector<WorkPtr> works;
    for (auto& b : bufs) works.push_back(pg.all_reduce(b.data(), b.size(), DType::kFloat32, ReduceOp::kSum));
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    for (auto& b : bufs) {
      if (b[999] != static_cast<float>(W * (W + 1) / 2)) fail("async all_reduce");
    }
  }
}

// Rank 1 dies (SIGKILL) or stalls (SIGSTOP) after the first barrier; rank 0's next collective
// must fail with CollectiveError instead of hanging.
void peer_lost(Runtime& rt, bool stall) {
  ProcessGroup& pg = rt.pg();
  rt.store().set("pid/" + std::to_string(pg.rank()), std::to_string(::getpid()));
  pg.barrier()->wait();
  if (pg.rank() == 1) {
    ::raise(stall ? SIGSTOP : SIGKILL);
    return;
  }
  std::vector<float> v(1 << 16, 1.0f);
  try {
    // The stalled case needs the deadline; the explicit 3 s makes the test finish quickly.
    pg.all_reduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum, Millis(3000))->wait();
    fail("all_reduce with a lost peer returned normally");
  } catch (const CollectiveError& e) {
    std::printf("got error: %s\n", e.what());
  }
  try {
    pg.barrier()->wait();
    fail("barrier after failure returned normally");
  } catch (const CollectiveError& e) {
    std::printf("then: %s\n", e.what());
  }
  if (stall) ::kill(std::stoi(rt.store().get("pid/1", Millis(5000))), SIGKILL);
}

void bucketer(Runtime& rt) {
  ProcessGroup& pg = rt.pg();
  const int R = pg.rank(), W = pg.size();
  const std::vector<std::size_t> sizes = {10, 3000, 5, 70000, 1, 40000, 128};
  std::vector<std::vector<float>> grads(sizes.size());
  std::vector<std::span<float>> spans;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    grads[k].resize(sizes[k]);
    spans.emplace_back(grads[k]);
  }
  GradBucketer b(pg, spans, 64 * 1024);  // small buckets: several of them
  if (b.num_buckets() < 3) fail("expected several buckets, got " + std::to_string(b.num_buckets()));
  if (b.bucket_of(sizes.size() - 1) != 0) fail("last parameter must be in the first bucket");
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      for (std::size_t i = 0; i < sizes[k]; ++i) grads[k][i] = static_cast<float>((R + 1) * (step + 1) + (k + i) % 5);
    }
    // Ranks mark gradients ready in different orders; buckets must still launch in order.
    std::vector<std::size_t> order(sizes.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = (R % 2 == 0) ? sizes.size() - 1 - k : k;
    for (std::size_t k : order) b.mark_ready(k);
    b.wait_all();
    double sum_ranks = 0;
    for (int r = 0; r < W; ++r) sum_ranks += (r + 1);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      for (std::size_t i = 0; i < sizes[k]; ++i) {
        const double want = sum_ranks * (step + 1) / W + static_cast<double>((k + i) % 5);
        if (std::fabs(grads[k][i] - want) > 1e-4) {
          fail("bucketer step " + std::to_string(step) + " param " + std::to_string(k) + " got " +
               std::to_string(grads[k][i]) + " want " + std::to_string(want));
          return;
        }
      }
    }
  }
  EvalMetrics m{1.5 * (R + 1), static_cast<double>(R), 10};
  EvalMetrics s = reduce_metrics(pg, m, 0);
  if (R == 0 && (s.total != 10.0 * W || s.correct != W * (W - 1) / 2.0)) fail("reduce_metrics");
}

void checkpoint_group(Runtime& rt, const std::string& dir) {
  ProcessGroup& pg = rt.pg();
  for (std::uint64_t step = 1; step <= 3; ++step) {
    Checkpoint c;
    c.step = step;
    c.sections["w"] = to_bytes(std::vector<float>(1000, static_cast<float>(step)));
    save_checkpoint(pg, dir, c);
  }
  auto c = load_checkpoint(pg, dir);
  if (!c || c->step != 3 || from_bytes<float>(c->sections.at("w"))[999] != 3.0f) fail("load_checkpoint latest");
  const auto before = std::chrono::steady_clock::now().time_since_epoch();
  rt.heartbeat(3);
  if (const char* path = std::getenv("CRUN_HEARTBEAT_FILE")) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    const auto beat = fd >= 0 ? crun::read_heartbeat_file(fd) : std::nullopt;
    if (fd >= 0) ::close(fd);
    if (!beat || beat->step != 3 || beat->monotonic_ns < std::chrono::nanoseconds(before).count() ||
        beat->monotonic_ns > std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch()).count()) {
      fail("heartbeat file does not hold step 3 stamped now");
    }
  }
  rt.finish();
}

// Checkpoints in each rank's own CRUN_STATE_DIR (no directory given): every rank writes its copy;
// a rank whose state is lost, or whose newest copy is torn, still loads the group's newest step.
void state_checkpoint(Runtime& rt) {
  ProcessGroup& pg = rt.pg();
  const auto own = state_checkpoint_dir();
  if (!own) return fail("CRUN_STATE_DIR is not set");
  auto save = [&](std::uint64_t step) {
    Checkpoint c;
    c.step = step;
    c.sections["w"] = to_bytes(std::vector<float>(1000, static_cast<float>(step)));
    save_checkpoint(pg, "", c);
  };
  for (std::uint64_t step = 1; step <= 3; ++step) save(step);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(*own)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names != std::vector<std::string>{"checkpoint-000000000002.crun", "checkpoint-000000000003.crun"}) {
    return fail("each rank keeps its own 2 newest copies");
  }
  auto loaded_is = [&](std::uint64_t step, const char* what) {
    const auto c = load_checkpoint(pg, "");
    if (!c || c->step != step || from_bytes<float>(c->sections.at("w"))[999] != static_cast<float>(step)) fail(what);
  };
  loaded_is(3, "load: every rank its own step 3");
  // Rank 1 lost its state; rank 2's newest copy is torn (its newest intact one is step 2).
  if (pg.rank() == 1) {
    for (const auto& e : std::filesystem::directory_iterator(*own)) std::filesystem::remove(e.path());
  }
  if (pg.rank() == 2) std::filesystem::resize_file(*own / "checkpoint-000000000003.crun", 100);
  pg.barrier()->wait();
  loaded_is(3, "load: step 3 from the lowest rank that holds it");
  for (const auto& e : std::filesystem::directory_iterator(*own)) std::filesystem::remove(e.path());
  pg.barrier()->wait();
  if (load_checkpoint(pg, "")) return fail("load with no copy anywhere: nothing");
  // One rank without a state directory: every rank's save throws.
  if (pg.rank() == 2) ::unsetenv("CRUN_STATE_DIR");
  try {
    save(4);
    return fail("a save that failed on one rank throws on every rank");
  } catch (const CheckpointError&) {
  }
  rt.finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: rt_worker <scenario> [args]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    InitOptions o;
    o.timeout = Millis(30000);
    // Small mesh rounds: every mesh collective runs in many rounds (see collectives_test.cc).
    if (const char* m = std::getenv("CRUN_TEST_MESH_SCRATCH")) o.gloo.mesh_scratch_bytes = std::stoull(m);
    auto rt = Runtime::init(o);
    if (scenario == "collectives") collectives(*rt);
    else if (scenario == "peer_killed") peer_lost(*rt, false);
    else if (scenario == "peer_stalled") peer_lost(*rt, true);
    else if (scenario == "bucketer") bucketer(*rt);
    else if (scenario == "checkpoint") checkpoint_group(*rt, argv[2]);
    else if (scenario == "state_checkpoint") state_checkpoint(*rt);
    else if (scenario == "init") rt->finish();
    else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    fail(std::string("exception: ") + e.what());
  }
  if (failures == 0) std::printf("PASS %s\n", scenario.c_str());
  return failures == 0 ? 0 : 1;
}
