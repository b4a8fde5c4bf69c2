// crun::rt's requests (worker_runtime/control.h): the line each call appends, its bounds, the
// call outside crun; and a native worker's stop-job and exclude-node under the real crun.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "worker_runtime/control.h"

namespace fs = std::filesystem;
using crun::test::ChildProcess;
using crun::test::count;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// CRUN_CONTROL_FILE set for the scope (unset: "").
struct ControlFileEnv {
  explicit ControlFileEnv(const std::string& path) {
    if (path.empty()) ::unsetenv("CRUN_CONTROL_FILE");
    else ::setenv("CRUN_CONTROL_FILE", path.c_str(), 1);
  }
  ~ControlFileEnv() { ::unsetenv("CRUN_CONTROL_FILE"); }
};

}  // namespace

TEST_CASE("runtime requests: one line each, appended; none outside crun", "[control]") {
  crun::test::TempDir dir;
  const fs::path file = dir.path / "control";
  {
    ControlFileEnv none("");
    CHECK_FALSE(crun::rt::request_stop_job("not under crun"));
  }
  ControlFileEnv env(file.string());
  CHECK(crun::rt::request_exclude_node("GPU 2: XID 79"));
  CHECK(crun::rt::request_stop_job("two\nlines\tand a tab"));
  CHECK(crun::rt::request_stop_job(""));
  CHECK(slurp(file) == "exclude-node GPU 2: XID 79\nstop-job two lines and a tab\nstop-job\n");
}

TEST_CASE("runtime requests: a long reason is cut to the agent's line bound, at a character's start", "[control]") {
  crun::test::TempDir dir;
  const fs::path file = dir.path / "control";
  ControlFileEnv env(file.string());
  std::string reason;
  while (reason.size() < 3000) reason += "\xc3\xa9";  // two bytes each
  CHECK(crun::rt::request_stop_job("x" + reason));
  const std::string text = slurp(file);
  REQUIRE(text.back() == '\n');
  const std::string line = text.substr(0, text.size() - 1);
  CHECK(line.size() <= 1024);
  CHECK(line.size() >= 1022);
  CHECK(line.rfind("stop-job x\xc3\xa9", 0) == 0);
  CHECK((static_cast<unsigned char>(line.back()) & 0xC0) == 0x80);  // ends with a whole character
  CHECK(line.substr(line.size() - 2) == "\xc3\xa9");
}

TEST_CASE("runtime requests: a file that cannot be written throws, naming it", "[control]") {
  ControlFileEnv env("/nonexistent-dir/control");
  try {
    crun::rt::request_stop_job("x");
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(std::string(e.what()).find("/nonexistent-dir/control") != std::string::npos);
  }
}

#ifdef CRUN_BIN
TEST_CASE("runtime requests under crun: stop-job keeps the rank's code, exclude-node exits 9", "[control_crun]") {
  SECTION("stop-job") {
    ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--no-python",
                    CRUN_REQUEST_WORKER, "stop-job", "native: loss is NaN", "4", "1"});
    REQUIRE(p.wait_exit() == 4);
    INFO(p.err());
    CHECK(count(p.out(), "requested rank=1 written=1") == 1);
    CHECK(count(p.err(), "rank 1 (local rank 1, pid ") == 1);
    CHECK(count(p.err(), "asks crun to stop the job (stop-job): native: loss is NaN") == 1);
    CHECK(count(p.err(), "restarting the group") == 0);
  }
  SECTION("exclude-node") {
    ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "1", "--max-restarts", "3", "--no-python",
                    CRUN_REQUEST_WORKER, "exclude-node", "native: ECC errors", "0"});
    REQUIRE(p.wait_exit() == 9);
    INFO(p.err());
    CHECK(count(p.err(), "asks crun to exclude this node (exclude-node): native: ECC errors") == 1);
  }
  SECTION("the same program outside crun") {
    ChildProcess p({CRUN_REQUEST_WORKER, "stop-job", "x", "4"}, {"CRUN_CONTROL_FILE="});
    REQUIRE(p.wait_exit() == 4);
    CHECK(count(p.out(), "written=0") == 1);
  }
}
#endif
