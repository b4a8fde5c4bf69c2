// End-to-end tests of examples/train_mlp: accuracy with 2 ranks, deterministic weights, and
// bit-identical resume after an injected failure under `crun --max-restarts 1` (from
// --checkpoint-dir, and from CRUN_STATE_DIR when none is given), and after a preemption notice
// (SIGUSR1).
#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "tests/runtime/proc_harness.h"

using crun::test::run_ranks;

namespace {

struct Final {
  double accuracy = -1;
  std::string sha;
};

Final parse_final(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"(final: accuracy=([0-9.]+) weights_sha256=([0-9a-f]{64}))");
  Final f;
  if (std::regex_search(out, m, re)) {
    f.accuracy = std::stod(m[1]);
    f.sha = m[2];
  }
  return f;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/crun-train-XXXXXX";
  return ::mkdtemp(tmpl);
}

// 2 ranks with --checkpoint-dir `dir`; once rank 0 reports its first epoch (of 5), mid-run, the
// ranks in `notified` get SIGUSR1 (crun forwards it to every worker; here the test plays that part).
crun::test::RunResult run_preempted(const std::string& dir, const std::vector<int>& notified, bool& signalled) {
  signalled = false;
  return run_ranks({CRUN_TRAIN_MLP, "--checkpoint-dir", dir}, 2, {}, std::chrono::seconds(120),
                   [&](int rank, const std::string& out, const std::vector<pid_t>& pids) {
                     if (signalled || rank != 0 || out.find("epoch 0:") == std::string::npos) return;
                     for (int r : notified) ::kill(pids.at(static_cast<std::size_t>(r)), SIGUSR1);
                     signalled = true;
                   });
}

// Both ranks of a preempted run stopped early and exited 0, rank 0 reporting the step; that step.
std::string stopped_at(const crun::test::RunResult& run) {
  CHECK(run.ranks[0].exit_code == 0);
  CHECK(run.ranks[1].exit_code == 0);
  std::smatch m;
  static const std::regex re(R"(preempted: checkpoint at step (\d+))");
  REQUIRE(std::regex_search(run.ranks[0].output, m, re));
  CHECK(std::stoi(m[1]) < 195);  // 5 epochs x 39 steps: it stopped early
  CHECK(run.ranks[0].output.find("final:") == std::string::npos);
  CHECK(run.ranks[1].output.find("preempted:") == std::string::npos);  // rank 0 reports
  return m[1];
}

// Runs one command (not a rank group): the harness with world 1, torchrun variables removed.
crun::test::RankResult run_command(std::vector<std::string> argv) {
  std::vector<std::string> full = {"/usr/bin/env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_RANK",
                                   "-u", "LOCAL_WORLD_SIZE", "-u", "MASTER_ADDR", "-u", "MASTER_PORT",
                                   "-u", "TORCHELASTIC_RESTART_COUNT"};
  full.insert(full.end(), argv.begin(), argv.end());
  auto res = run_ranks(full, 1, {}, std::chrono::seconds(150));
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  return res.ranks[0];
}

}  // namespace

TEST_CASE("train_mlp defaults reach >= 95% with 2 ranks, deterministically", "[train_accuracy]") {
  auto a = run_ranks({CRUN_TRAIN_MLP}, 2, {}, std::chrono::seconds(120));
  INFO(a.summary());
  REQUIRE_FALSE(a.timed_out);
  REQUIRE(a.ranks[0].exit_code == 0);
  REQUIRE(a.ranks[1].exit_code == 0);
  Final fa = parse_final(a.ranks[0].output);
  CHECK(fa.accuracy >= 0.95);
  CHECK(a.ranks[1].output.find("final:") == std::string::npos);  // only rank 0 reports
  auto b = run_ranks({CRUN_TRAIN_MLP}, 2, {}, std::chrono::seconds(120));
  REQUIRE(b.ranks[0].exit_code == 0);
  CHECK(parse_final(b.ranks[0].output).sha == fa.sha);
}

TEST_CASE("train_mlp resumes bit-identically after an injected failure under crun", "[train_resume]") {
  const std::string plain_dir = temp_dir(), fail_dir = temp_dir();
  auto plain = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--no-python", CRUN_TRAIN_MLP,
                            "--checkpoint-dir", plain_dir});
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  auto failed = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--no-python",
                             CRUN_TRAIN_MLP, "--checkpoint-dir", fail_dir, "--fail-at-step", "120", "--fail-rank",
                             "1", "--checkpoint-every", "50"});
  INFO(failed.output);
  REQUIRE(failed.exit_code == 0);
  CHECK(failed.output.find("injected failure at step 120 on rank 1") != std::string::npos);
  CHECK(failed.output.find("resumed from checkpoint at step 100") != std::string::npos);
  const Final p = parse_final(plain.output), f = parse_final(failed.output);
  REQUIRE(p.sha.size() == 64);
  CHECK(f.sha == p.sha);
  std::filesystem::remove_all(plain_dir);
  std::filesystem::remove_all(fail_dir);
}

TEST_CASE("train_mlp under crun checkpoints into CRUN_STATE_DIR by default and resumes bit-identically from it",
          "[train_state]") {
  auto plain = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--no-python", CRUN_TRAIN_MLP});
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  auto failed = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--no-python",
                             CRUN_TRAIN_MLP, "--fail-at-step", "120", "--fail-rank", "1", "--checkpoint-every", "50"});
  INFO(failed.output);
  REQUIRE(failed.exit_code == 0);
  CHECK(failed.output.find("injected failure at step 120 on rank 1") != std::string::npos);
  CHECK(failed.output.find("resumed from checkpoint at step 100") != std::string::npos);
  const Final p = parse_final(plain.output), f = parse_final(failed.output);
  REQUIRE(p.sha.size() == 64);
  CHECK(f.sha == p.sha);
}

TEST_CASE("train_mlp: a hung rank is caught by the heartbeat watchdog, named, and the job resumes bit-identically",
          "[train_hang]") {
  const std::string plain_dir = temp_dir(), hang_dir = temp_dir();
  auto plain = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--no-python", CRUN_TRAIN_MLP,
                            "--checkpoint-dir", plain_dir});
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  // Rank 1 goes silent after step 120; rank 0 finishes step 120, beats, and waits for it in step 121.
  auto hung = run_command({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                           "--heartbeat-timeout", "3", "--no-python", CRUN_TRAIN_MLP, "--checkpoint-dir", hang_dir,
                           "--hang-at-step", "120", "--hang-rank", "1", "--checkpoint-every", "50"});
  INFO(hung.output);
  REQUIRE(hung.exit_code == 0);
  CHECK(hung.output.find("hanging after step 120 on rank 1") != std::string::npos);
  static const std::regex caught(
      R"(crun: local rank 1 \(pid \d+\) is hung: no heartbeat for [3-9]\.\d s, last at step 119; state S \(sleeping\)[^\n]*; sent SIGKILL)");
  CHECK(std::regex_search(hung.output, caught));
  static const std::regex root(R"(root cause\): rank 1 \(local rank 1.*killed by SIGKILL.*restarting the group\ncrun:   watchdog: local rank 1)");
  CHECK(std::regex_search(hung.output, root));
  CHECK(hung.output.find("resumed from checkpoint at step 100") != std::string::npos);
  const Final p = parse_final(plain.output), h = parse_final(hung.output);
  REQUIRE(p.sha.size() == 64);
  CHECK(h.sha == p.sha);
  std::filesystem::remove_all(plain_dir);
  std::filesystem::remove_all(hang_dir);
}

TEST_CASE("train_mlp checkpoints at an agreed step on SIGUSR1, exits 0, and resumes bit-identically",
          "[train_preempt]") {
  auto plain = run_ranks({CRUN_TRAIN_MLP}, 2, {}, std::chrono::seconds(120));
  INFO(plain.summary());
  REQUIRE_FALSE(plain.timed_out);
  REQUIRE(plain.ranks[0].exit_code == 0);
  const Final reference = parse_final(plain.ranks[0].output);
  REQUIRE(reference.sha.size() == 64);

  const std::string dir = temp_dir();
  bool signalled = false;
  auto preempted = run_preempted(dir, {0, 1}, signalled);
  INFO(preempted.summary());
  REQUIRE_FALSE(preempted.timed_out);
  REQUIRE(signalled);
  const std::string step = stopped_at(preempted);

  auto resumed = run_ranks({CRUN_TRAIN_MLP, "--checkpoint-dir", dir}, 2, {}, std::chrono::seconds(120));
  INFO(resumed.summary());
  REQUIRE_FALSE(resumed.timed_out);
  REQUIRE(resumed.ranks[0].exit_code == 0);
  CHECK(resumed.ranks[0].output.find("resumed from checkpoint at step " + step + " ") != std::string::npos);
  CHECK(parse_final(resumed.ranks[0].output).sha == reference.sha);
  std::filesystem::remove_all(dir);
}

TEST_CASE("train_mlp: a preemption notice that reaches one rank stops every rank at the same step",
          "[train_preempt]") {
  // Only rank 1 is signalled; rank 0 learns of it through the step's vote, which rides in the
  // gradients' all_reduce. Without the vote rank 1 would leave and rank 0's next collective fail.
  const std::string dir = temp_dir();
  bool signalled = false;
  auto run = run_preempted(dir, {1}, signalled);
  INFO(run.summary());
  REQUIRE_FALSE(run.timed_out);
  REQUIRE(signalled);
  stopped_at(run);
  std::filesystem::remove_all(dir);
}
