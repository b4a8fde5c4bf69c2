// Node checks (agent/node_check.h, agent/node_checks.h, agent/gpu_memory.h): the command runner
// with real processes on a real io_context (fails, hangs, floods, is missing), the built-in
// disk check on real directories, and the gpu wait with a test double standing in for NVML.
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "agent/gpu_memory.h"
#include "agent/node_check.h"
#include "agent/node_checks.h"
#include "tests/support/temp_dir.h"

using namespace crun;
using namespace std::chrono_literals;

namespace {

const std::string kPath = "/usr/local/bin:/usr/bin:/bin";

// Runs one command to its verdict; the loop is bounded (a broken runner fails, never hangs).
NodeCheckResult run_command(const std::string& command, std::chrono::milliseconds timeout = 5s) {
  boost::asio::io_context io;
  CommandCheck check(io, command, timeout, kPath);
  std::optional<NodeCheckResult> result;
  check.run([&](NodeCheckResult r) { result = std::move(r); });
  io.run_for(timeout + 10s);
  REQUIRE(result);
  return *result;
}

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A test double for the GPUs: each read answers what `used` holds now.
class FakeGpus final : public GpuMemory {
 public:
  explicit FakeGpus(std::vector<std::uint64_t>* used, std::string* error) : used_(used), error_(error) {}
  GpuMemoryReading read() override {
    ++reads;
    return {*used_, *error_};
  }
  int reads = 0;

 private:
  std::vector<std::uint64_t>* used_;
  std::string* error_;
};

constexpr std::uint64_t kMiB = 1 << 20;

}  // namespace

TEST_CASE("split_command splits as a shell does, without running one", "[node_check]") {
  std::string error;
  CHECK(split_command("a b  c", error) == std::vector<std::string>{"a", "b", "c"});
  CHECK(split_command("sh -c 'echo $HOME; exit 3'", error) == std::vector<std::string>{"sh", "-c", "echo $HOME; exit 3"});
  CHECK(split_command(R"(a "b \"c\" d" e\ f)", error) == std::vector<std::string>{"a", "b \"c\" d", "e f"});
  CHECK(split_command("x''", error) == std::vector<std::string>{"x"});
  CHECK_FALSE(split_command("a 'b", error));
  CHECK(error.find("unbalanced") != std::string::npos);
  CHECK_FALSE(split_command("   ", error));
}

TEST_CASE("a command check: healthy on exit 0, else its last lines as one line", "[node_check]") {
  CHECK(run_command("true").healthy());
  const auto r = run_command("sh -c 'echo one; echo two >&2; echo three; exit 3'");
  CHECK(r.check == "sh -c 'echo one; echo two >&2; echo three; exit 3'");
  CHECK(r.reason == "exit code 3: one | two | three");
  CHECK(run_command("sh -c 'kill -SEGV $$'").reason.find("SIGSEGV") != std::string::npos);
}

TEST_CASE("a command check that is missing says so in one line", "[node_check]") {
  CHECK(run_command("crun-no-such-check --x").reason == "not found");
  CHECK(run_command("/nonexistent/check").reason == "not found");
}

TEST_CASE("a command check that hangs is killed at the timeout, its whole group", "[node_check]") {
  const auto start = std::chrono::steady_clock::now();
  // The shell's child keeps the pipes open: the group's SIGKILL must end it too.
  const auto r = run_command("sh -c 'echo stuck; sleep 100 & wait'", 300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.reason == "no answer within 0.3 s (killed): stuck");
  CHECK(took < 5s);
}

TEST_CASE("a command check that prints megabytes keeps a bounded tail", "[node_check]") {
  const long before = peak_rss_kib();
  const auto r = run_command("sh -c 'head -c 64000000 /dev/zero | tr \"\\0\" x; echo; echo the end; exit 1'", 60s);
  CHECK(r.reason.size() < 1024);
  CHECK(r.reason.find("the end") != std::string::npos);
  CHECK(r.reason.find('\n') == std::string::npos);
  CHECK(peak_rss_kib() - before < 16 * 1024);  // 64 MB went through, not into memory
}

TEST_CASE("the disk check: writable, and free space at least the minimum", "[node_check]") {
  crun::test::TempDir dir("crun-disk-check");
  CHECK(check_directories({dir.path.string()}, 1).empty());
  CHECK(std::filesystem::is_empty(dir.path));  // the probe file is removed
  const std::string full = check_directories({dir.path.string()}, std::uint64_t{1} << 62);
  CHECK(full.find("free, under --node-check-min-free") != std::string::npos);
  CHECK(check_directories({"/nonexistent-crun-dir"}, 1).find("is not writable") != std::string::npos);
}

TEST_CASE("the net check: the announced address must be on an interface that is up", "[node_check]") {
  CHECK(check_network("127.0.0.1", "localhost").empty());
  CHECK(check_network("192.0.2.77", "").find("is on no interface") != std::string::npos);
  CHECK(check_network("", "no-such-host.invalid").find("does not resolve") != std::string::npos);
}

TEST_CASE("gpu_memory_back: within the margin of the baseline, device by device", "[node_check]") {
  CHECK(gpu_memory_back({100 * kMiB, 200 * kMiB}, {150 * kMiB, 200 * kMiB}, 64 * kMiB).empty());
  CHECK(gpu_memory_back({100 * kMiB, 200 * kMiB}, {100 * kMiB, 300 * kMiB}, 64 * kMiB) ==
        "GPU 1 still holds 300 MiB (200 MiB before the first start)");
  CHECK_FALSE(gpu_memory_back({100 * kMiB}, {100 * kMiB, 0}, 64 * kMiB).empty());
}

TEST_CASE("the gpu check waits for memory to go back to the baseline, bounded by the timeout", "[node_check]") {
  boost::asio::io_context io;
  std::vector<std::uint64_t> used{1000 * kMiB};
  std::string error;
  NodeCheckSettings s;
  s.disabled = {"disk"};
  s.timeout = 3s;
  auto gpus = std::make_unique<FakeGpus>(&used, &error);
  FakeGpus* fake = gpus.get();
  NodeChecks checks(io, s, NodeCheckTargets{}, std::move(gpus));
  checks.take_baseline();  // 1000 MiB before the first start
  used = {9000 * kMiB};    // a dead worker still holds 8 GB

  SECTION("memory freed while it waits: healthy") {
    std::optional<NodeCheckResult> result;
    std::string said;
    checks.run([&](NodeCheckResult r) { result = r; }, [&](const std::string& line) {
      said = line;
      used = {1100 * kMiB};  // freed now (within the margin)
    });
    io.run_for(5s);
    REQUIRE(result);
    CHECK(result->healthy());
    CHECK(said.find("GPU 0 still holds 9000 MiB") != std::string::npos);
    CHECK(fake->reads >= 3);
  }
  SECTION("never freed: unhealthy at the timeout") {
    std::optional<NodeCheckResult> result;
    const auto start = std::chrono::steady_clock::now();
    checks.run([&](NodeCheckResult r) { result = r; });
    io.run_for(10s);
    REQUIRE(result);
    CHECK(result->check == "gpu");
    CHECK(result->reason == "GPU 0 still holds 9000 MiB (1000 MiB before the first start) after 3 s");
    CHECK(std::chrono::steady_clock::now() - start >= 3s);
  }
  SECTION("a GPU that does not answer: unhealthy at once") {
    error = "GPU 0 does not answer: Unknown Error (NVML error 999)";
    std::optional<NodeCheckResult> result;
    checks.run([&](NodeCheckResult r) { result = r; });
    io.run_for(2s);
    REQUIRE(result);
    CHECK(result->reason == error);
  }
}

TEST_CASE("node checks run in order and the first unhealthy one ends the pass", "[node_check]") {
  boost::asio::io_context io;
  crun::test::TempDir dir("crun-node-checks");
  NodeCheckSettings s;
  s.commands = {"true", "sh -c 'echo second >&2; exit 2'", "sh -c 'touch " + (dir.path / "third").string() + "'"};
  s.paths = {dir.path.string()};
  s.min_free = 1;
  NodeChecks checks(io, s, NodeCheckTargets{}, nullptr);
  CHECK(checks.names() == std::vector<std::string>{"disk", s.commands[0], s.commands[1], s.commands[2]});
  std::optional<NodeCheckResult> result;
  checks.run([&](NodeCheckResult r) { result = r; });
  io.run_for(10s);
  REQUIRE(result);
  CHECK(result->check == s.commands[1]);
  CHECK(result->reason == "exit code 2: second");
  CHECK_FALSE(std::filesystem::exists(dir.path / "third"));
}
