// Node-local rows of the fault matrix (docs/reliability.md): one standalone agent, the fault in
// what it writes to or reads from. "measured:" lines feed the table (tests/faults/measure.py).
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/proc_probe.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

// crun --standalone running `sh -c script` as every worker ($W is the test worker).
std::vector<std::string> crun_sh(std::vector<std::string> flags, const std::string& script) {
  std::vector<std::string> argv{CRUN_BIN, "--standalone", "--stop-timeout", "2"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (std::string s : {std::string("--no-python"), std::string("/bin/sh"), std::string("-c"),
                        "W=" CRUN_TEST_WORKER "; " + script, std::string("sh")}) {
    argv.push_back(s);
  }
  return argv;
}

// The i of the last whole "line r=0 i=<i> " in `text`, or -1 (a scan from the end: the tail is
// checked on every read of a 200 MB flood).
long last_line_index(const std::string& text) {
  const std::string tag = "line r=0 i=";
  for (std::size_t at = text.rfind(tag); at != std::string::npos; at = at == 0 ? std::string::npos : text.rfind(tag, at - 1)) {
    std::size_t end = at + tag.size();
    long i = 0;
    bool digits = false;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') {
      i = i * 10 + (text[end++] - '0');
      digits = true;
    }
    if (digits && end < text.size() && text[end] == ' ') return i;
  }
  return -1;
}

// Bytes crun_test_worker --lines N prints for rank `r`.
std::uint64_t lines_bytes(int r, long n) {
  std::uint64_t total = 0;
  for (long i = 0; i < n; ++i) total += std::string("line r=" + std::to_string(r) + " i=" + std::to_string(i) + " ").size() + 91;
  return total;
}

}  // namespace

TEST_CASE("a full disk under --log-dir: the job runs and fails as usual, one line per lost log", "[log_disk_full]") {
  TempDir mnt("crun-faults");
  // A private mount namespace: a 64 KiB tmpfs over the log dir, filled before crun starts.
  const std::string script =
      "mount -t tmpfs -o size=64k crun-faults-full \"$0\" || exit 90; head -c 1M /dev/zero >\"$0/filler\" 2>/dev/null; exec \"$@\"";
  std::vector<std::string> argv{"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, mnt.path.string()};
  // The disk node check would refuse this node before the start (agent.node_check.disk_full): off,
  // to see a disk that fills while the job runs.
  for (std::string a : {CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--stop-timeout", "2", "--no-node-check", "disk", "--log-dir"}) {
    argv.push_back(a);
  }
  argv.push_back(mnt.path.string());
  for (std::string a : {"--tee", "3", "--no-python", CRUN_TEST_WORKER, "--lines", "2000", "--stderr-lines", "30",
                        "--only-rank", "1", "--error-file", "disk full test", "--exit", "3"}) {
    argv.push_back(a);
  }
  const auto t0 = SteadyClock::now();
  ChildProcess p(argv);
  // Bound: 20 s (the job itself takes milliseconds); nothing waits on the disk.
  REQUIRE(p.wait_exit(20s) == 3);
  measured("full log disk: the failing job exited", ms_since(t0));
  const std::string err = p.err();
  CHECK_THAT(err, Catch::Contains("worker failed (root cause): rank 1 (local rank 1") && Catch::Contains("exit code 3"));
  // One line per log file that could not be written (rank 0 may be stopped before it writes) and
  // one for failure_report.json.
  const int lost = count(err, "No space left on device; the rest of this log is dropped");
  CHECK_THAT(err, Catch::Contains("/attempt_0/1/stdout.log: No space left on device; the rest of this log is dropped") &&
                      Catch::Contains("/attempt_0/1/stderr.log: No space left on device; the rest of this log is dropped"));
  CHECK(lost <= 4);
  CHECK_THAT(err, Catch::Contains("failure_report.json: No space left on device"));
  CHECK(count(err, "crun: cannot ") == lost + 1);
  // The console got everything (tee), the tail and the report too.
  CHECK(count(p.out(), "[default1]:line r=1 ") == 2000);
  CHECK(count(err, "[default1]:err r=1 ") == 30);
  CHECK_THAT(err, Catch::Contains("crun:   | err r=1 i=29"));
}

TEST_CASE("a worker that closes its stdout keeps running; its stderr and the others' output go on", "[stdout_closed]") {
  const std::string script =
      "if [ \"$LOCAL_RANK\" = 0 ]; then exec 1>&-; echo \"closed stdout pid=$$$$\" >&2; fi; "
      "exec $W --lines 3 --stderr-lines 2 --hang --trap SIGUSR2";
  ChildProcess p(crun_sh({"--nproc-per-node", "2"}, script));
  REQUIRE(p.wait_until([](const std::string&, const std::string& err) { return err.find("closed stdout pid=") != std::string::npos; },
                       20s));
  REQUIRE(p.wait_for_stdout("ready rank=1 ", 1, 20s));
  REQUIRE(p.wait_until([](const std::string&, const std::string& err) { return count(err, "err r=0 i=1") == 1; }, 20s));
  const auto closer = pids_in(p.err(), "closed stdout", "pid");
  const auto other = pids_in(p.out(), "ready rank=1", "pid");
  REQUIRE(closer.size() == 1);
  REQUIRE(other.size() == 1);
  CHECK(::kill(closer[0], 0) == 0);  // the end of its stdout is not the end of the worker
  const auto t0 = SteadyClock::now();
  ::kill(closer[0], SIGUSR2);
  ::kill(other[0], SIGUSR2);
  // Bound: 10 s; both exit 0 at once.
  REQUIRE(p.wait_exit(10s) == 0);
  measured("worker closed its stdout: the job ended after its workers", ms_since(t0));
  CHECK(count(p.out(), "line r=1 ") == 3);
  CHECK(count(p.out(), "line r=0 ") == 0);
  CHECK_THAT(p.out(), Catch::Contains("rank 1 got SIGUSR2"));
}

TEST_CASE("a worker floods stdout: every byte is routed, the agent's memory stays bounded, it reacts at once",
          "[stdout_flood]") {
  constexpr long kLines = 2'000'000;  // ~210 MB
  long peak_kib = 0;
  SECTION("200 MB, then exit 0: every byte arrives, in bounded memory") {
    const std::string script =
        "if [ \"$LOCAL_RANK\" = 0 ]; then exec $W --lines " + std::to_string(kLines) + "; fi; exec $W --lines 3";
    const auto t0 = SteadyClock::now();
    ChildProcess p(crun_sh({"--nproc-per-node", "2"}, script), {}, 64 * 1024);
    // The agent's RSS, sampled whenever output arrives, until the flood's last line.
    REQUIRE(p.wait_until(
        [&](const std::string& out, const std::string&) {
          peak_kib = std::max(peak_kib, rss_kib(p.pid()));
          return last_line_index(out) == kLines - 1;
        },
        60s));
    REQUIRE(p.wait_exit(20s) == 0);
    measured("stdout flood: 200 MB routed", ms_since(t0));
    measured_kib("stdout flood: agent peak RSS", peak_kib);
    CHECK(p.stdout_bytes() == lines_bytes(0, kLines) + lines_bytes(1, 3));
    CHECK(peak_kib < 64 * 1024);
  }
  SECTION("during a flood, another worker is SIGKILLed: the agent stops the group and exits at once") {
    const std::string script =
        "if [ \"$LOCAL_RANK\" = 0 ]; then exec $W --lines 100000000; fi; echo \"victim pid=$$$$\" >&2; exec $W --hang";
    ChildProcess p(crun_sh({"--nproc-per-node", "2"}, script), {}, 64 * 1024);
    REQUIRE(p.wait_until([](const std::string&, const std::string& err) { return err.find("victim pid=") != std::string::npos; },
                         20s));
    REQUIRE(p.wait_until([](const std::string& out, const std::string&) { return last_line_index(out) >= 200000; }, 60s));
    const auto victim = pids_in(p.err(), "victim", "pid");
    REQUIRE(victim.size() == 1);
    const auto t0 = SteadyClock::now();
    ::kill(victim[0], SIGKILL);
    // Bound: --stop-timeout (2 s) + 8 s; the flooding worker is stopped with SIGTERM.
    REQUIRE(p.wait_exit(10s) == 128 + SIGKILL);
    measured("stdout flood: a failure elsewhere stopped the job", ms_since(t0));
    CHECK_THAT(p.err(), Catch::Contains("worker failed (root cause): rank 1 (local rank 1") &&
                            Catch::Contains("killed by SIGKILL"));
  }
}
