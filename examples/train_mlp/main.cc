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
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

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

// Set by SIGUSR1. Each step all-reduces (max) it, so every rank sees the request at the same step.
volatile std::sig_atomic_t g_preempt_requested = 0;

extern "C" void on_preempt_signal(int) { g_preempt_requested = 1; }

void install_preempt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_preempt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

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
  std::string checkpoint_dir;
  int checkpoint_every = 50;  // steps; 0 = only at the end of each epoch
  long fail_at_step = -1;
  int fail_rank = 0;
  std::uint64_t seed = 1234;
  std::string backend;  // default: gloo for cpu, nccl for cuda
  std::string device = "cpu";
};

Checkpoint make_checkpoint(const Mlp& m, const std::vector<std::vector<float>>& mom, std::uint64_t step,
                           std::uint64_t epoch, std::uint64_t batch) {
  Checkpoint c;
  c.step = step;
  for (std::size_t k = 0; k < m.params.size(); ++k) {
    c.sections["param" + std::to_string(k)] = to_bytes(m.params[k]);
    c.sections["momentum" + std::to_string(k)] = to_bytes(mom[k]);
  }
  c.sections["position"] = to_bytes(std::vector<std::uint64_t>{epoch, batch, step});
  return c;
}

std::string weights_sha256(const Mlp& m) {
  Sha256 h;
  for (const auto& p : m.params) h.update(p.data(), p.size() * sizeof(float));
  return h.hex();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"crun example: data-parallel MLP training on synthetic data"};
  app.add_option("--epochs", a.epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", a.batch_size, "per-rank batch size")->check(CLI::PositiveNumber);
  app.add_option("--lr", a.lr, "learning rate");
  app.add_option("--momentum", a.momentum, "SGD momentum");
  app.add_option("--hidden", a.hidden, "hidden units")->check(CLI::PositiveNumber);
  app.add_option("--train-size", a.train_size, "training samples");
  app.add_option("--test-size", a.test_size, "test samples");
  app.add_option("--checkpoint-dir", a.checkpoint_dir, "directory for checkpoints (resume from the latest)");
  app.add_option("--checkpoint-every", a.checkpoint_every, "checkpoint every N steps (0: each epoch end)");
  app.add_option("--fail-at-step", a.fail_at_step, "inject a failure before step S (first attempt only)");
  app.add_option("--fail-rank", a.fail_rank, "rank that fails");
  app.add_option("--seed", a.seed, "seed of data, init and shuffling");
  app.add_option("--backend", a.backend, "gloo or nccl (default: gloo for cpu, nccl for cuda)");
  app.add_option("--device", a.device, "cpu, or cuda (cuBLAS + NCCL, GPU = LOCAL_RANK)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.footer(
      "Preemption: on SIGUSR1 (crun forwards Slurm's preemption notice to the workers) every rank stops at\n"
      "the same step boundary, writes a checkpoint to --checkpoint-dir (none without it), rank 0 prints\n"
      "'preempted: checkpoint at step N', and the program exits 0. Run it again with the same\n"
      "--checkpoint-dir to resume; the final weights equal an uninterrupted run's.");
  CLI11_PARSE(app, argc, argv);
  install_preempt_handler();  // before init: a notice during start-up stops at the first step

  try {
    InitOptions io;
    io.backend = !a.backend.empty() ? a.backend : (a.device == "cuda" ? "nccl" : "gloo");
#ifndef TRAIN_MLP_WITH_CUDA
    if (a.device == "cuda") throw std::runtime_error("--device cuda: this build has no CUDA (CRUN_WITH_CUDA=OFF)");
#endif
    io.timeout = Millis(120000);
    auto rt = Runtime::init(io);
    ProcessGroup& pg = rt->pg();       // gradients (gloo, or nccl with --device cuda)
    ProcessGroup& cpu = rt->cpu_pg();  // host memory: checkpoints and metrics
    const int rank = rt->rank(), world = rt->world_size();

    Dataset train, test;
    make_datasets(DatasetSpec{}, a.seed, a.train_size, a.test_size, train, test);
    Mlp model(train.dim, a.hidden, train.classes, a.seed + 1);
    std::vector<std::vector<float>> mom;
    for (auto& p : model.params) mom.emplace_back(p.size(), 0.0f);

    std::uint64_t epoch = 0, batch_pos = 0, step = 0;
    if (!a.checkpoint_dir.empty()) {
      if (auto c = load_checkpoint(cpu, a.checkpoint_dir)) {
        for (std::size_t k = 0; k < model.params.size(); ++k) {
          model.params[k] = from_bytes<float>(c->sections.at("param" + std::to_string(k)));
          mom[k] = from_bytes<float>(c->sections.at("momentum" + std::to_string(k)));
        }
        auto pos = from_bytes<std::uint64_t>(c->sections.at("position"));
        epoch = pos.at(0);
        batch_pos = pos.at(1);
        step = pos.at(2);
        if (rank == 0) std::printf("resumed from checkpoint at step %llu (epoch %llu, batch %llu)\n",
                                   static_cast<unsigned long long>(step), static_cast<unsigned long long>(epoch),
                                   static_cast<unsigned long long>(batch_pos));
      }
    }

#ifdef TRAIN_MLP_WITH_CUDA
    std::unique_ptr<CudaMlp> gpu;
    if (a.device == "cuda") {
      gpu = std::make_unique<CudaMlp>(train.dim, a.hidden, train.classes, a.batch_size, rt->env().local_rank);
      gpu->from_host(model, mom);
    }
    auto sync_to_host = [&] { if (gpu) gpu->to_host(model, mom); };
#else
    auto sync_to_host = [] {};
#endif
    std::vector<std::span<float>> grad_spans;
    for (auto& g : model.grads) grad_spans.emplace_back(g);
    // One bucket per layer: the output layer's gradients (ready first in backward) all-reduce
    // while the hidden layer's backward still runs. (The default 25 MB would be one bucket.)
    GradBucketer bucketer(pg, grad_spans, (model.params[2].size() + model.params[3].size()) * sizeof(float));
    DistributedSampler sampler(train.size(), world, rank, true, a.seed);
    const std::uint64_t batches = sampler.num_samples() / static_cast<std::size_t>(a.batch_size);
    const bool first_attempt = rt->env().restart_count == 0;

    std::vector<float> xb(static_cast<std::size_t>(a.batch_size) * train.dim);
    std::vector<int> yb(a.batch_size);
    std::uint64_t samples = 0;
    // Preemption vote: launched at the start of each step (it completes in the background while the
    // step computes), read at its end; the max over ranks is the same on every rank.
    std::int32_t stop_vote = 0;
    bool preempted = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (; epoch < static_cast<std::uint64_t>(a.epochs); ++epoch, batch_pos = 0) {
      sampler.set_epoch(epoch);
      const auto idx = sampler.indices();
      double loss_sum = 0;
      for (; batch_pos < batches; ++batch_pos) {
        if (first_attempt && static_cast<long>(step) == a.fail_at_step && rank == a.fail_rank) {
          std::fprintf(stderr, "train_mlp: injected failure at step %llu on rank %d\n",
                       static_cast<unsigned long long>(step), rank);
          std::fflush(stderr);
          std::_Exit(13);
        }
        stop_vote = g_preempt_requested ? 1 : 0;
        WorkPtr vote = cpu.all_reduce(&stop_vote, 1, DType::kInt32, ReduceOp::kMax);
        for (int i = 0; i < a.batch_size; ++i) {
          const std::size_t s = idx[batch_pos * a.batch_size + i];
          std::copy_n(&train.x[s * train.dim], train.dim, &xb[static_cast<std::size_t>(i) * train.dim]);
          yb[i] = train.y[s];
        }
#ifdef TRAIN_MLP_WITH_CUDA
        if (gpu) {
          loss_sum += gpu->step(xb.data(), yb.data(), a.batch_size, pg, a.lr, a.momentum);
        } else
#endif
        {
          loss_sum += model.forward_backward(xb.data(), yb.data(), a.batch_size,
                                             [&](std::size_t k) { bucketer.mark_ready(k); });
          bucketer.wait_all();
          for (std::size_t k = 0; k < model.params.size(); ++k) {
            auto& p = model.params[k];
            auto& v = mom[k];
            const auto& g = model.grads[k];
            for (std::size_t i = 0; i < p.size(); ++i) {
              v[i] = a.momentum * v[i] + g[i];
              p[i] -= a.lr * v[i];
            }
          }
        }
        ++step;
        samples += static_cast<std::uint64_t>(a.batch_size) * world;
        const bool periodic = a.checkpoint_every > 0 && step % a.checkpoint_every == 0;
        vote->wait();
        preempted = stop_vote != 0;
        if (!a.checkpoint_dir.empty() && (periodic || preempted)) {
          sync_to_host();
          save_checkpoint(cpu, a.checkpoint_dir, make_checkpoint(model, mom, step, epoch, batch_pos + 1));
        }
        if (preempted) {
          if (rank == 0) {
            if (a.checkpoint_dir.empty()) {
              std::printf("preempted: at step %llu, no --checkpoint-dir so no checkpoint\n",
                          static_cast<unsigned long long>(step));
            } else {
              std::printf("preempted: checkpoint at step %llu\n", static_cast<unsigned long long>(step));
            }
            std::fflush(stdout);
          }
          break;
        }
        rt->heartbeat();
      }
      if (preempted) break;
      if (!a.checkpoint_dir.empty() && a.checkpoint_every == 0) {
        sync_to_host();
        save_checkpoint(cpu, a.checkpoint_dir, make_checkpoint(model, mom, step, epoch + 1, 0));
      }
      if (rank == 0) std::printf("epoch %llu: train_loss=%.4f\n", static_cast<unsigned long long>(epoch),
                                 batches ? loss_sum / static_cast<double>(batches) : 0.0);
      std::fflush(stdout);
    }
    if (preempted) {
      rt->finish();
      return 0;
    }
    sync_to_host();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Distributed evaluation: rank r takes test rows r, r+W, ...; sums go to rank 0.
    EvalMetrics local;
    std::vector<float> xr;
    for (std::size_t i = static_cast<std::size_t>(rank); i < test.size(); i += static_cast<std::size_t>(world)) {
      std::size_t correct = 0;
      local.loss_sum += model.evaluate(&test.x[i * test.dim], &test.y[i], 1, correct);
      local.correct += static_cast<double>(correct);
      local.total += 1;
    }
    EvalMetrics all = reduce_metrics(cpu, local, 0);
    rt->finish();
    if (rank == 0) {
      std::printf("throughput: samples_per_sec=%.0f ranks=%d seconds=%.3f\n", secs > 0 ? samples / secs : 0.0, world,
                  secs);
      std::printf("final: accuracy=%.4f weights_sha256=%s\n", all.accuracy(), weights_sha256(model).c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
