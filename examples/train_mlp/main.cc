// train_mlp: data-parallel training of an MLP classifier on a synthetic Gaussian-mixture data set
// with crun's runtime: per-rank shards through DistributedSampler, gradients averaged by the
// bucketer (Gloo all_reduce), SGD with momentum, atomic checkpoints, resume after a restart.
//
// Run under crun or torchrun:  crun --standalone --nproc-per-node 2 build/examples/train_mlp/train_mlp
// Rank 0 ends with exactly one line:  final: accuracy=<0..1> weights_sha256=<hex>
// Bit-identical resume: the checkpoint holds weights, momentum, epoch, batch position and step;
// the data, the sampler order and the reduction order are all deterministic.
// Preemption: SIGUSR1 (crun forwards Slurm's notice) makes every rank stop at the same step
// boundary, checkpoint there, and exit 0; rank 0 prints "preempted: checkpoint at step N".
//
// Reading order: parse_args (the flags), TrainState with resume/save_checkpoint_at (what a
// checkpoint holds), Stepper (one SGD step on the CPU or the GPU, and the preemption vote),
// Trainer (the epochs and steps, failure injection, acting on the vote), evaluate, and main,
// which strings them together.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/train_mlp/dataset.h"
#include "examples/train_mlp/mlp.h"
#ifdef TRAIN_MLP_WITH_CUDA
#include "examples/train_mlp/mlp_cuda.h"
#endif
#include "worker_runtime/bucketer.h"
#include "worker_runtime/checkpoint.h"
#include "worker_runtime/hash.h"
#include "worker_runtime/metrics.h"
#include "worker_runtime/runtime.h"
#include "worker_runtime/sampler.h"

using namespace crun::rt;

namespace {

// Set by SIGUSR1. Each step puts it to the ranks' vote (Stepper::step), so every rank sees the
// request at the same step.
volatile std::sig_atomic_t g_preempt_requested = 0;

extern "C" void on_preempt_signal(int) { g_preempt_requested = 1; }

void install_preempt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_preempt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

// ---- configuration ----------------------------------------------------------------------------

struct Args {
  int epochs = 5;
  // Defaults: ~6.5 ms of compute per step on this VM against ~0.1 ms for the step's all_reduce of
  // the 88 KB of gradients, so 2 ranks scale; >= 99% test accuracy in ~1.5 s with 2 ranks.
  int batch_size = 256;  // per rank
  float lr = 0.05f;
  float momentum = 0.9f;
  int hidden = 512;
  std::size_t train_size = 20000;
  std::size_t test_size = 5000;
  std::string checkpoint_dir;  // "" and CRUN_STATE_DIR set: each rank's own state directory
  bool checkpoints = false;    // either of them
  int checkpoint_every = 50;  // steps; 0 = only at the end of each epoch
  long fail_at_step = -1;
  int fail_rank = 0;
  long hang_at_step = -1;
  int hang_rank = 0;
  std::uint64_t seed = 1234;
  std::string backend;  // default: gloo for cpu, nccl for cuda
  std::string device = "cpu";
};

// The flags into `a`; an exit code when the program must end now (--help, a bad flag).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  CLI::App app{"crun example: data-parallel MLP training on synthetic data"};
  app.add_option("--epochs", a.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "per-rank batch size")->check(CLI::PositiveNumber);
  app.add_option("--lr", a.lr, "learning rate");
  app.add_option("--momentum", a.momentum, "SGD momentum");
  app.add_option("--hidden", a.hidden, "hidden units")->check(CLI::PositiveNumber);
  app.add_option("--train-size", a.train_size, "training samples");
  app.add_option("--test-size", a.test_size, "test samples");
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "directory for checkpoints (resume from the latest); default under crun: each rank's own "
                 "CRUN_STATE_DIR, kept across restarts");
  app.add_option("--checkpoint-every", a.checkpoint_every, "checkpoint every N steps (0: each epoch end)");
  app.add_option("--fail-at-step", a.fail_at_step, "inject a failure before step S (first attempt only)");
  app.add_option("--fail-rank", a.fail_rank, "rank that fails");
  app.add_option("--hang-at-step", a.hang_at_step,
                 "after step S, stop heartbeating and sleep forever (first attempt only; for crun's hang watchdog)");
  app.add_option("--hang-rank", a.hang_rank, "rank that hangs");
  app.add_option("--seed", a.seed, "seed of data, init and shuffling");
  app.add_option("--backend", a.backend, "gloo or nccl (default: gloo for cpu, nccl for cuda)");
  app.add_option("--device", a.device, "cpu, or cuda (cuBLAS + NCCL, GPU = LOCAL_RANK)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.footer(
      "Preemption: on SIGUSR1 (crun forwards Slurm's preemption notice to the workers) every rank stops at\n"
      "the same step boundary, writes a checkpoint to --checkpoint-dir (none without it), rank 0 prints\n"
      "'preempted: checkpoint at step N', and the program exits 0. Run it again with the same\n"
      "--checkpoint-dir to resume; the final weights equal an uninterrupted run's.");
  CLI11_PARSE(app, argc, argv);
  a.checkpoints = !a.checkpoint_dir.empty() || state_checkpoint_dir().has_value();
  return std::nullopt;
}

InitOptions init_options(const Args& a) {
  InitOptions io;
  io.backend = !a.backend.empty() ? a.backend : (a.device == "cuda" ? "nccl" : "gloo");
#ifndef TRAIN_MLP_WITH_CUDA
  if (a.device == "cuda") throw std::runtime_error("--device cuda: this build has no CUDA (CRUN_WITH_CUDA=OFF)");
#endif
  io.timeout = Millis(120000);
  return io;
}

// ---- the model's state and its checkpoints ----------------------------------------------------

// Where training stands: the next batch to train and the number of steps taken.
struct Position {
  std::uint64_t epoch = 0, batch = 0, step = 0;
};

// What a checkpoint holds: the weights, their momentum (one vector per parameter) and the position.
struct TrainState {
  Mlp model;
  std::vector<std::vector<float>> momentum;
  Position at;

  TrainState(const Dataset& train, int hidden, std::uint64_t seed) : model(train.dim, hidden, train.classes, seed) {
    for (auto& p : model.params) momentum.emplace_back(p.size(), 0.0f);
  }
};

Checkpoint make_checkpoint(const TrainState& s, const Position& at) {
  Checkpoint c;
  c.step = at.step;
  for (std::size_t k = 0; k < s.model.params.size(); ++k) {
    c.sections["param" + std::to_string(k)] = to_bytes(s.model.params[k]);
    c.sections["momentum" + std::to_string(k)] = to_bytes(s.momentum[k]);
  }
  c.sections["position"] = to_bytes(std::vector<std::uint64_t>{at.epoch, at.batch, at.step});
  return c;
}

// Resumes from the latest checkpoint in `dir`, if there is one (rank 0 says so).
void resume(ProcessGroup& cpu, const std::string& dir, int rank, TrainState& s) {
  auto c = load_checkpoint(cpu, dir);
  if (!c) return;
  for (std::size_t k = 0; k < s.model.params.size(); ++k) {
    s.model.params[k] = from_bytes<float>(c->sections.at("param" + std::to_string(k)));
    s.momentum[k] = from_bytes<float>(c->sections.at("momentum" + std::to_string(k)));
  }
  auto pos = from_bytes<std::uint64_t>(c->sections.at("position"));
  s.at.epoch = pos.at(0);
  s.at.batch = pos.at(1);
  s.at.step = pos.at(2);
  if (rank == 0) std::printf("resumed from checkpoint at step %llu (epoch %llu, batch %llu)\n",
                             static_cast<unsigned long long>(s.at.step), static_cast<unsigned long long>(s.at.epoch),
                             static_cast<unsigned long long>(s.at.batch));
}

std::string weights_sha256(const Mlp& m) {
  Sha256 h;
  for (const auto& p : m.params) h.update(p.data(), p.size() * sizeof(float));
  return h.hex();
}

// ---- one SGD step -------------------------------------------------------------------------------

// Runs training steps on the state's model: on the CPU, where the bucketer averages the
// gradients once backward has made them, or with --device cuda on the GPU (the state then lags
// behind until sync_to_host()). Each step also settles the ranks' preemption vote.
class Stepper {
 public:
  struct Outcome {
    double loss;  // the batch's mean loss on this rank
    bool stop;    // some rank asked to stop after this step (the same on every rank)
  };

  Stepper(TrainState& s, const Args& a, ProcessGroup& pg, [[maybe_unused]] ProcessGroup& cpu,
          [[maybe_unused]] const Dataset& train, [[maybe_unused]] int local_rank)
      : s_(s),
        a_(a),
        pg_(pg),
#ifdef TRAIN_MLP_WITH_CUDA
        cpu_(cpu),
        gpu_(make_gpu(s, a, train, local_rank)),
#endif
        // One bucket (DDP's 25 MB default holds the whole model), all-reduced by wait_all() on
        // this thread, with the vote in it as one more value (span 0). Per-layer buckets, the
        // output layer's all-reducing on the group's thread while the hidden layer's backward
        // runs, measured 3-9 % slower at 2 ranks on 2 cores (docs/benchmarks.md's history): with
        // every core training there is no idle one to overlap into, only thread hand-offs to pay.
        bucketer_(pg, spans(vote_, s.model)) {}

  // One step on the batch `x`, `y` of a.batch_size rows; `stop_wanted` is this rank's vote.
  Outcome step(const float* x, const int* y, bool stop_wanted) {
#ifdef TRAIN_MLP_WITH_CUDA
    if (gpu_) {
      // The vote all-reduces on the host group while the GPU computes.
      std::int32_t vote = stop_wanted ? 1 : 0;
      WorkPtr w = cpu_.all_reduce(&vote, 1, DType::kInt32, ReduceOp::kMax);
      const double loss = gpu_->step(x, y, a_.batch_size, pg_, a_.lr, a_.momentum);
      w->wait();
      return {loss, vote != 0};
    }
#endif
    // The averaged vote is above 0 when any rank voted 1: no collective of its own.
    vote_[0] = stop_wanted ? 1.0f : 0.0f;
    bucketer_.mark_ready(0);
    const double loss =
        s_.model.forward_backward(x, y, a_.batch_size, [&](std::size_t k) { bucketer_.mark_ready(k + 1); });
    bucketer_.wait_all();
    for (std::size_t k = 0; k < s_.model.params.size(); ++k) {
      auto& p = s_.model.params[k];
      auto& v = s_.momentum[k];
      const auto& g = s_.model.grads[k];
      for (std::size_t i = 0; i < p.size(); ++i) {
        v[i] = a_.momentum * v[i] + g[i];
        p[i] -= a_.lr * v[i];
      }
    }
    return {loss, vote_[0] > 0.0f};
  }

  // Brings the GPU's weights and momentum back into the state (checkpoints, evaluation).
  void sync_to_host() {
#ifdef TRAIN_MLP_WITH_CUDA
    if (gpu_) gpu_->to_host(s_.model, s_.momentum);
#endif
  }

 private:
  // What the bucketer averages: the vote, then the gradients in the model's order.
  static std::vector<std::span<float>> spans(std::vector<float>& vote, Mlp& m) {
    std::vector<std::span<float>> all{std::span<float>(vote)};
    for (auto& g : m.grads) all.emplace_back(g);
    return all;
  }
#ifdef TRAIN_MLP_WITH_CUDA
  static std::unique_ptr<CudaMlp> make_gpu(const TrainState& s, const Args& a, const Dataset& train, int local_rank) {
    if (a.device != "cuda") return nullptr;
    auto gpu = std::make_unique<CudaMlp>(train.dim, a.hidden, train.classes, a.batch_size, local_rank);
    gpu->from_host(s.model, s.momentum);
    return gpu;
  }
#endif

  TrainState& s_;
  const Args& a_;
  ProcessGroup& pg_;
#ifdef TRAIN_MLP_WITH_CUDA
  ProcessGroup& cpu_;
  std::unique_ptr<CudaMlp> gpu_;
#endif
  std::vector<float> vote_ = std::vector<float>(1);  // before bucketer_, which holds a span of it
  GradBucketer bucketer_;
};

// ---- the training loop --------------------------------------------------------------------------

// The epochs from the state's position to --epochs: per-rank batches from the sampler, a step
// each, checkpoints, the injected failure, and the preemption vote.
class Trainer {
 public:
  Trainer(const Args& a, Runtime& rt, const Dataset& train, TrainState& s, Stepper& stepper)
      : a_(a),
        rt_(rt),
        cpu_(rt.cpu_pg()),
        train_(train),
        s_(s),
        stepper_(stepper),
        rank_(rt.rank()),
        world_(rt.world_size()),
        sampler_(train.size(), world_, rank_, true, a.seed),
        batches_(sampler_.num_samples() / static_cast<std::size_t>(a.batch_size)),
        first_attempt_(rt.env().restart_count == 0),
        xb_(static_cast<std::size_t>(a.batch_size) * train.dim),
        yb_(a.batch_size) {}

  // Trains to the last epoch; false when a preemption stopped every rank at the same step.
  bool run() {
    for (; s_.at.epoch < static_cast<std::uint64_t>(a_.epochs); ++s_.at.epoch, s_.at.batch = 0) {
      if (!run_epoch()) return false;
    }
    return true;
  }

  std::uint64_t samples() const { return samples_; }  // trained by all ranks together

 private:
  // The rest of the current epoch; false when preempted.
  bool run_epoch() {
    sampler_.set_epoch(s_.at.epoch);
    const auto idx = sampler_.indices();
    double loss_sum = 0;
    for (; s_.at.batch < batches_; ++s_.at.batch) {
      if (!run_step(idx, loss_sum)) return false;
      if (first_attempt_ && static_cast<long>(s_.at.step) == a_.hang_at_step && rank_ == a_.hang_rank) hang_now();
      rt_.heartbeat(static_cast<std::int64_t>(s_.at.step));
    }
    if (a_.checkpoints && a_.checkpoint_every == 0) save_checkpoint_at({s_.at.epoch + 1, 0, s_.at.step});
    if (rank_ == 0) std::printf("epoch %llu: train_loss=%.4f\n", static_cast<unsigned long long>(s_.at.epoch),
                                batches_ ? loss_sum / static_cast<double>(batches_) : 0.0);
    std::fflush(stdout);
    return true;
  }

  // One step on the current batch, adding its loss to `loss_sum`; false when preempted.
  bool run_step(const std::vector<std::size_t>& idx, double& loss_sum) {
    if (first_attempt_ && static_cast<long>(s_.at.step) == a_.fail_at_step && rank_ == a_.fail_rank) fail_now();
    // Preemption vote: this rank's, taken at the start of the step; the step's outcome is every
    // rank's answer, the same on all of them.
    fill_batch(idx);
    const Stepper::Outcome out = stepper_.step(xb_.data(), yb_.data(), g_preempt_requested != 0);
    loss_sum += out.loss;
    ++s_.at.step;
    samples_ += static_cast<std::uint64_t>(a_.batch_size) * world_;
    const bool periodic = a_.checkpoint_every > 0 && s_.at.step % a_.checkpoint_every == 0;
    const bool preempted = out.stop;
    if (a_.checkpoints && (periodic || preempted)) {
      save_checkpoint_at({s_.at.epoch, s_.at.batch + 1, s_.at.step});
    }
    if (preempted) report_preemption();
    return !preempted;
  }

  void fill_batch(const std::vector<std::size_t>& idx) {
    for (int i = 0; i < a_.batch_size; ++i) {
      const std::size_t s = idx[s_.at.batch * a_.batch_size + i];
      std::copy_n(&train_.x[s * train_.dim], train_.dim, &xb_[static_cast<std::size_t>(i) * train_.dim]);
      yb_[i] = train_.y[s];
    }
  }

  // The checkpoint of the state as it is, to resume at `at`.
  void save_checkpoint_at(const Position& at) {
    stepper_.sync_to_host();
    save_checkpoint(cpu_, a_.checkpoint_dir, make_checkpoint(s_, at));
  }

  // Alive but silent, as a rank stuck in a deadlock: no more heartbeats, no more collectives.
  [[noreturn]] void hang_now() const {
    std::fprintf(stderr, "train_mlp: hanging after step %llu on rank %d\n", static_cast<unsigned long long>(s_.at.step),
                 rank_);
    std::fflush(stderr);
    for (;;) ::pause();
  }

  [[noreturn]] void fail_now() const {
    std::fprintf(stderr, "train_mlp: injected failure at step %llu on rank %d\n",
                 static_cast<unsigned long long>(s_.at.step), rank_);
    std::fflush(stderr);
    std::_Exit(13);
  }

  void report_preemption() const {
    if (rank_ != 0) return;
    if (!a_.checkpoints) {
      std::printf("preempted: at step %llu, no --checkpoint-dir (nor CRUN_STATE_DIR) so no checkpoint\n",
                  static_cast<unsigned long long>(s_.at.step));
    } else {
      std::printf("preempted: checkpoint at step %llu\n", static_cast<unsigned long long>(s_.at.step));
    }
    std::fflush(stdout);
  }

  const Args& a_;
  Runtime& rt_;
  ProcessGroup& cpu_;
  const Dataset& train_;
  TrainState& s_;
  Stepper& stepper_;
  const int rank_, world_;
  DistributedSampler sampler_;
  const std::uint64_t batches_;
  const bool first_attempt_;
  std::vector<float> xb_;
  std::vector<int> yb_;
  std::uint64_t samples_ = 0;
};

// ---- evaluation ---------------------------------------------------------------------------------

// Distributed evaluation: rank r takes test rows r, r+W, ...; the sums go to rank 0.
EvalMetrics evaluate(ProcessGroup& cpu, const Mlp& model, const Dataset& test, int rank, int world) {
  EvalMetrics local;
  for (std::size_t i = static_cast<std::size_t>(rank); i < test.size(); i += static_cast<std::size_t>(world)) {
    std::size_t correct = 0;
    local.loss_sum += model.evaluate(&test.x[i * test.dim], &test.y[i], 1, correct);
    local.correct += static_cast<double>(correct);
    local.total += 1;
  }
  return reduce_metrics(cpu, local, 0);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (auto code = parse_args(argc, argv, a)) return *code;
  install_preempt_handler();  // before init: a notice during start-up stops at the first step

  try {
    auto rt = Runtime::init(init_options(a));
    ProcessGroup& pg = rt->pg();       // gradients (gloo, or nccl with --device cuda)
    ProcessGroup& cpu = rt->cpu_pg();  // host memory: checkpoints and metrics
    const int rank = rt->rank(), world = rt->world_size();

    Dataset train, test;
    make_datasets(DatasetSpec{}, a.seed, a.train_size, a.test_size, train, test);
    TrainState state(train, a.hidden, a.seed + 1);
    if (a.checkpoints) resume(cpu, a.checkpoint_dir, rank, state);

    Stepper stepper(state, a, pg, cpu, train, rt->env().local_rank);
    Trainer trainer(a, *rt, train, state, stepper);
    const auto t0 = std::chrono::steady_clock::now();
    if (!trainer.run()) {  // preempted
      rt->finish();
      return 0;
    }
    stepper.sync_to_host();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    EvalMetrics all = evaluate(cpu, state.model, test, rank, world);
    rt->finish();
    if (rank == 0) {
      const double samples = static_cast<double>(trainer.samples());
      std::printf("throughput: samples_per_sec=%.0f ranks=%d seconds=%.3f\n", secs > 0 ? samples / secs : 0.0, world,
                  secs);
      std::printf("final: accuracy=%.4f weights_sha256=%s\n", all.accuracy(), weights_sha256(state.model).c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
