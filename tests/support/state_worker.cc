// A worker that keeps its training state in CRUN_STATE_DIR (agent/state_directory.h), for the
// state tests and benches: each step folds (rank, step) into a digest (tests/support/state_digest.h)
// and saves "<step> <digest>" plus --state-bytes of weights derived from it, committed by writing
// ".state.tmp" and renaming it to "state". At a start it resumes from the saved state if there is
// one (a torn or foreign file: exit 3).
//   --steps N        steps to run in all (default 100)
//   --step-ms M      sleep M ms per step (default 0)
//   --save-every K   save every K steps (default 1)
//   --state-bytes B  the weights' bytes in each save (default 0)
//   --work N         N rounds of arithmetic per step (a compute-bound step, for benches; default 0)
//   --commit-fifo F  after each save, write "<CRUN_STATE_DIR>/state\n" to the FIFO F (opened at the start,
//                    blocking until its reader opens it): the floor sender of bench/state/replication.py
//   --out DIR        write DIR/progress-<rank> ("<step>", renamed into place after each step) and
//                    append "start rank=<r> step=<s> pid=<pid> ns=<CLOCK_REALTIME ns>" to DIR/starts-<rank>
// At the end it prints "final rank=<r> digest=<hex> resumed_from=<step> train_s=<seconds of its steps>".
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/state_digest.h"

namespace {

bool write_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == text.size();
}

std::string read_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

// The weights: `bytes` bytes that only `digest` determines.
std::string weights(std::uint64_t digest, std::size_t bytes) {
  std::string w(bytes, '\0');
  std::uint64_t x = digest;
  for (std::size_t i = 0; i < bytes; i += 8) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    std::memcpy(w.data() + i, &x, std::min<std::size_t>(8, bytes - i));
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 100, step_ms = 0, save_every = 1, work = 0;
  std::size_t state_bytes = 0;
  std::string out, commit_fifo;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--steps") steps = std::atol(v), ++i;
    else if (a == "--step-ms") step_ms = std::atol(v), ++i;
    else if (a == "--save-every") save_every = std::max(1L, std::atol(v)), ++i;
    else if (a == "--state-bytes") state_bytes = static_cast<std::size_t>(std::atoll(v)), ++i;
    else if (a == "--out") out = v, ++i;
    else if (a == "--work") work = std::atol(v), ++i;
    else if (a == "--commit-fifo") commit_fifo = v, ++i;
  }
  const char* rank_env = std::getenv("RANK");
  const char* dir_env = std::getenv("CRUN_STATE_DIR");
  if (!rank_env || !dir_env) {
    std::fprintf(stderr, "state_worker: RANK and CRUN_STATE_DIR must be set\n");
    return 2;
  }
  const int rank = std::atoi(rank_env);
  const std::string dir = dir_env;
  long step = 0;
  std::uint64_t digest = crun::test::state_digest(rank, 0);
  const std::string saved = read_file(dir + "/state");
  if (!saved.empty()) {
    int saved_rank = -1;
    if (std::sscanf(saved.c_str(), "%d %ld %" SCNx64, &saved_rank, &step, &digest) != 3 || saved_rank != rank ||
        digest != crun::test::state_digest(rank, step)) {
      std::fprintf(stderr, "state_worker: rank %d found a torn or foreign state\n", rank);
      return 3;
    }
    const auto nl = saved.find('\n');
    if (nl == std::string::npos || saved.substr(nl + 1) != weights(digest, state_bytes)) {
      std::fprintf(stderr, "state_worker: rank %d found torn weights\n", rank);
      return 3;
    }
  }
  const long resumed_from = step;
  if (!out.empty()) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string line = "start rank=" + std::to_string(rank) + " step=" + std::to_string(step) +
                             " pid=" + std::to_string(::getpid()) + " ns=" + std::to_string(ns) + "\n";
    const int fd = ::open((out + "/starts-" + std::to_string(rank)).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  int fifo = -1;
  if (!commit_fifo.empty() && (fifo = ::open(commit_fifo.c_str(), O_WRONLY | O_CLOEXEC)) < 0) {
    std::fprintf(stderr, "state_worker: cannot open --commit-fifo %s: %s\n", commit_fifo.c_str(), std::strerror(errno));
    return 2;
  }
  const std::string committed_line = dir + "/state\n";
  const auto began = std::chrono::steady_clock::now();
  volatile std::uint64_t sink = 0;
  while (step < steps) {
    std::uint64_t w = digest;
    for (long i = 0; i < work; ++i) w = crun::test::state_step(w, rank, i);
    sink = sink + w;
    digest = crun::test::state_step(digest, rank, step);
    ++step;
    if (step % save_every == 0 || step == steps) {
      char head[96];
      std::snprintf(head, sizeof head, "%d %ld %" PRIx64 "\n", rank, step, digest);
      if (!write_file(dir + "/.state.tmp", head + weights(digest, state_bytes)) ||
          ::rename((dir + "/.state.tmp").c_str(), (dir + "/state").c_str()) != 0) {
        std::fprintf(stderr, "state_worker: rank %d cannot save: %s\n", rank, std::strerror(errno));
        return 4;
      }
      if (fifo >= 0 && ::write(fifo, committed_line.data(), committed_line.size()) != static_cast<ssize_t>(committed_line.size())) {
        std::fprintf(stderr, "state_worker: rank %d cannot tell --commit-fifo: %s\n", rank, std::strerror(errno));
        return 4;
      }
    }
    if (!out.empty()) {
      const std::string p = out + "/progress-" + std::to_string(rank);
      write_file(p + ".tmp", std::to_string(step));
      ::rename((p + ".tmp").c_str(), p.c_str());
    }
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::printf("final rank=%d digest=%016" PRIx64 " resumed_from=%ld train_s=%.4f\n", rank, digest, resumed_from, train_s);
  return 0;
}
