// Small pure parts of the agent: signal names, line routing, environment, failure report.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "agent/failure_report.h"
#include "agent/line_router.h"
#include "agent/signal_names.h"
#include "agent/worker_env.h"

using namespace crun;

namespace {
std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}
std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    const auto eq = kv.find('=');
    REQUIRE(m.count(kv.substr(0, eq)) == 0);  // no duplicate keys
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}
}  // namespace

TEST_CASE("signal names both ways", "[units]") {
  REQUIRE(signal_number("SIGTERM") == SIGTERM);
  REQUIRE(signal_number("usr1") == SIGUSR1);
  REQUIRE(signal_number("9") == SIGKILL);
  REQUIRE_FALSE(signal_number("SIGNOPE"));
  REQUIRE_FALSE(signal_number("9x"));
  REQUIRE(signal_name(SIGSEGV) == "SIGSEGV");
}

TEST_CASE("line router: whole prefixed lines, partial last line flushed, tail kept", "[units]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    LineRouter r(StreamRoute{p[1], "[default1]:", -1, 2, ""});
    r.feed("a", 1);
    r.feed("b\nc", 3);
    r.feed("d\ne\n", 4);
    r.feed("tail-without-newline", 20);
    r.finish();
    REQUIRE(r.tail().size() == 2);
    REQUIRE(r.tail()[0] == "e");
    REQUIRE(r.tail()[1] == "tail-without-newline");
  }
  ::close(p[1]);
  REQUIRE(read_fd(p[0]) == "[default1]:ab\n[default1]:cd\n[default1]:e\n[default1]:tail-without-newline\n");
  ::close(p[0]);
}

TEST_CASE("line router: raw bytes to the file, unprefixed console", "[units]") {
  char path[] = "/tmp/crun-router-XXXXXX";
  const int file = ::mkstemp(path);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    LineRouter r(StreamRoute{p[1], "", file, 0, ""});
    r.feed("x\ny", 3);
    r.finish();
  }
  ::close(p[1]);
  REQUIRE(read_fd(p[0]) == "x\ny\n");
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(content == "x\ny");
  ::unlink(path);
  ::close(p[0]);
}

TEST_CASE("worker environment: torchrun's contract", "[units]") {
  RoundInfo round;
  round.world_size = 4;
  round.master_addr = "127.0.0.1";
  round.master_port = 4242;
  WorkerIdentity who;
  who.local_rank = 3;
  who.local_world_size = 4;
  who.restart_count = 1;
  who.max_restarts = 5;
  who.role = "trainer";
  who.run_id = "job";
  who.error_file = "/tmp/e.json";
  auto env = as_map(worker_environment({"PATH=/bin", "RANK=99", "OMP_NUM_THREADS=8"}, round, who));
  REQUIRE(env["PATH"] == "/bin");
  REQUIRE(env["RANK"] == "3");
  REQUIRE(env["LOCAL_RANK"] == "3");
  REQUIRE(env["GROUP_RANK"] == "0");
  REQUIRE(env["GROUP_WORLD_SIZE"] == "1");
  REQUIRE(env["ROLE_NAME"] == "trainer");
  REQUIRE(env["ROLE_RANK"] == "3");
  REQUIRE(env["ROLE_WORLD_SIZE"] == "4");
  REQUIRE(env["LOCAL_WORLD_SIZE"] == "4");
  REQUIRE(env["WORLD_SIZE"] == "4");
  REQUIRE(env["MASTER_ADDR"] == "127.0.0.1");
  REQUIRE(env["MASTER_PORT"] == "4242");
  REQUIRE(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  REQUIRE(env["TORCHELASTIC_MAX_RESTARTS"] == "5");
  REQUIRE(env["TORCHELASTIC_RUN_ID"] == "job");
  REQUIRE(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  REQUIRE(env["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json");
  REQUIRE(env["OMP_NUM_THREADS"] == "8");  // kept: the user set it
  REQUIRE(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  REQUIRE(env["NCCL_ASYNC_ERROR_HANDLING"] == "1");  // torch 1.13's name, as its torchrun sets
}

TEST_CASE("worker environment: OMP_NUM_THREADS and NCCL error handling as torchrun sets them", "[units]") {
  RoundInfo round;
  round.world_size = 2;
  WorkerIdentity who;
  SECTION("several workers per node: OMP_NUM_THREADS=1") {
    who.local_world_size = 2;
    auto env = as_map(worker_environment({"PATH=/bin"}, round, who));
    REQUIRE(env["OMP_NUM_THREADS"] == "1");
  }
  SECTION("one worker per node: OMP_NUM_THREADS stays unset (torch uses every core)") {
    who.local_world_size = 1;
    auto env = as_map(worker_environment({"PATH=/bin"}, round, who));
    REQUIRE(env.count("OMP_NUM_THREADS") == 0);
  }
  SECTION("the user's NCCL settings are kept, under either name") {
    who.local_world_size = 2;
    auto env = as_map(worker_environment({"NCCL_ASYNC_ERROR_HANDLING=0", "TORCH_NCCL_ASYNC_ERROR_HANDLING=2"}, round, who));
    REQUIRE(env["NCCL_ASYNC_ERROR_HANDLING"] == "0");
    REQUIRE(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2");
  }
}

TEST_CASE("failure report: torch @record error file, text and json", "[units]") {
  char path[] = "/tmp/crun-error-XXXXXX";
  const int fd = ::mkstemp(path);
  const std::string json =
      R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "...", "timestamp": "1"}}})";
  REQUIRE(::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()));
  ::close(fd);
  REQUIRE(read_error_file_message(path) == "RuntimeError: boom");
  REQUIRE(read_error_file_message("/nonexistent/file").empty());
  ::unlink(path);

  FailureReport r;
  r.rank = 5;
  r.local_rank = 1;
  r.host = "node7";
  r.pid = 1234;
  r.term_signal = SIGSEGV;
  r.error_message = "RuntimeError: boom";
  r.stderr_tail = {"a", "b"};
  const std::string text = r.format_text();
  REQUIRE(text.find("rank 5 (local rank 1") != std::string::npos);
  REQUIRE(text.find("node7, pid 1234, killed by SIGSEGV") != std::string::npos);
  REQUIRE(r.to_json().find("\"addr\": null") != std::string::npos);  // standalone: no address
  REQUIRE(text.find("RuntimeError: boom") != std::string::npos);
  REQUIRE(text.find("| b") != std::string::npos);
  const std::string j = r.to_json();
  REQUIRE(j.find("\"exit_code\": 139") != std::string::npos);
  REQUIRE(j.find("\"signal\": \"SIGSEGV\"") != std::string::npos);
  r.addr = "10.0.0.7";  // multi-node: two hosts may share a name; the address tells them apart
  REQUIRE(r.format_text().find(" on node7 (10.0.0.7), pid 1234,") != std::string::npos);
  REQUIRE(r.to_json().find("\"addr\": \"10.0.0.7\"") != std::string::npos);
}

TEST_CASE("failure report: a worker's stderr need not be UTF-8", "[units]") {
  // Found by tests/fuzz/error_file: to_json threw nlohmann's type_error 316, and crun --log-dir
  // died of SIGABRT writing failure_report.json for a worker that printed a byte like 0xff.
  FailureReport r;
  r.stderr_tail = {"bad \xff byte", "cut \xe2\x82"};
  r.error_message = "ok";
  std::string j;
  REQUIRE_NOTHROW(j = r.to_json());
  CHECK(j.find("\"bad \xef\xbf\xbd byte\"") != std::string::npos);  // U+FFFD in its place
  CHECK(r.format_text().find("| bad \xff byte") != std::string::npos);  // the console gets the bytes
}

TEST_CASE("failure report: the error file's traceback, unless stderr already shows it", "[units]") {
  char path[] = "/tmp/crun-error-XXXXXX";
  const int fd = ::mkstemp(path);
  const std::string json = R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack":)"
                           R"( "Traceback (most recent call last):\n  File \"t.py\", line 3, in main\n)"
                           R"(    raise RuntimeError(\"boom\")\nRuntimeError: boom\n", "timestamp": "1"}}})";
  REQUIRE(::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()));
  ::close(fd);
  FailureReport r;
  r.error_message = read_error_file_message(path);
  r.error_traceback = read_error_file_traceback(path);
  ::unlink(path);
  REQUIRE(read_error_file_traceback("/nonexistent/file").empty());
  SECTION("the worker caught the exception (nothing on stderr): the report shows the traceback") {
    const std::string text = r.format_text();
    REQUIRE(text.find("crun:   traceback from the error file:\ncrun:   | Traceback (most recent call last):\n") !=
            std::string::npos);
    REQUIRE(text.find("crun:   |     raise RuntimeError(\"boom\")\ncrun:   | RuntimeError: boom\n") != std::string::npos);
    REQUIRE(r.to_json().find("\"error_traceback\": \"Traceback") != std::string::npos);
  }
  SECTION("Python printed it: only the stderr tail shows it") {
    r.stderr_tail = {"Traceback (most recent call last):", "    raise RuntimeError(\"boom\")", "RuntimeError: boom"};
    const std::string text = r.format_text();
    REQUIRE(text.find("traceback from the error file") == std::string::npos);
    REQUIRE(text.find("| RuntimeError: boom") != std::string::npos);
  }
  SECTION("a deep traceback: its last 40 lines") {
    r.error_traceback.clear();
    for (int i = 0; i < 100; ++i) r.error_traceback += "frame " + std::to_string(i) + "\n";
    const std::string text = r.format_text();
    REQUIRE(text.find("traceback from the error file (last 40 of 100 lines):") != std::string::npos);
    REQUIRE(text.find("| frame 59\n") == std::string::npos);
    REQUIRE(text.find("| frame 60\n") != std::string::npos);
    REQUIRE(text.find("| frame 99\n") != std::string::npos);
  }
}
