// agent/failure_report: the root cause from torch's @record error file and the stderr tail,
// as text and JSON.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/failure_report.h"
#include "agent/rank_stack.h"

using namespace crun;

TEST_CASE("failure report: torch @record error file, text and json", "[failure_report]") {
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
  r.status = ExitStatus::killed(SIGSEGV);
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

TEST_CASE("failure report: a worker's stderr need not be UTF-8", "[failure_report]") {
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

TEST_CASE("failure report: the error file's traceback, unless stderr already shows it", "[failure_report]") {
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

TEST_CASE("failure report: its JSON reads back as the same report, so it can cross nodes", "[failure_report]") {
  FailureReport r;
  r.role = "trainer";
  r.restart_count = 2;
  r.restarting = true;
  r.rank = 7;
  r.local_rank = 3;
  r.host = "node7";
  r.addr = "10.0.0.7";
  r.pid = 4321;
  r.status = ExitStatus::killed(SIGKILL);
  r.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'790'000'123'456));
  r.error_file = "/tmp/x/error.json";
  r.error_message = "RuntimeError: boom";
  r.error_traceback = "Traceback (most recent call last):\n  boom";
  r.stderr_tail = {"a", "b \"quoted\""};
  r.watchdog = "file timer scope 'step' ran 12 ms past its deadline; sent SIGKILL";
  const auto back = FailureReport::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->to_json() == r.to_json());
  CHECK(back->format_text() == r.format_text());
  CHECK(back->time == r.time);
  CHECK(back->status == ExitStatus::killed(SIGKILL));
  CHECK(back->watchdog == r.watchdog);
  CHECK_THAT(r.format_text(), Catch::Contains("crun:   watchdog: file timer scope 'step'"));

  r.status = ExitStatus::exited(3);
  r.addr.clear();
  const auto exited = FailureReport::from_json(r.to_json());
  REQUIRE(exited);
  CHECK(exited->status == ExitStatus::exited(3));
  CHECK(exited->addr.empty());
  CHECK(exited->to_json() == r.to_json());

  CHECK_FALSE(FailureReport::from_json("crun: worker failed (root cause): rank 3"));  // old text form
  CHECK_FALSE(FailureReport::from_json("{}"));
  // A time system_clock cannot hold (found by fuzz.error_file: UB in from_time_t before the check).
  std::string far = r.to_json();
  const auto at = far.find("\"time\": \"");
  REQUIRE(at != std::string::npos);
  far.replace(at + 9, 4, "5223");
  CHECK_FALSE(FailureReport::from_json(far));
  far.replace(at + 9, 4, "2261");
  CHECK(FailureReport::from_json(far));  // still within range
  CHECK_FALSE(FailureReport::from_json("[1, 2]"));
  // A number no int holds (found by fuzz.error_file: a float of 1.3e23 converted to int, UB).
  std::string big = r.to_json();
  const auto code = big.find("\"exit_code\": ");
  REQUIRE(code != std::string::npos);
  big.replace(code + 13, 0, "130000000000000000000");
  CHECK_FALSE(FailureReport::from_json(big));
  std::string fraction = r.to_json();
  const auto pid = fraction.find("\"pid\": ") + 7;
  fraction.replace(pid, fraction.find_first_of(",\n", pid) - pid, "42.5");
  CHECK_FALSE(FailureReport::from_json(fraction));
}

TEST_CASE("failure report: a worker's request, in the text, the JSON and back", "[failure_report]") {
  FailureReport r;
  r.rank = 1;
  r.host = "h";
  r.status = ExitStatus::exited(7);
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'790'000'000));
  CHECK(FailureReport::from_json(r.to_json())->request.empty());
  CHECK(r.to_json().find("\"request\"") == std::string::npos);
  r.request = "stop-job data corrupt";
  CHECK_THAT(r.format_text(), Catch::Contains("no restart: the worker asked for none\n") &&
                                  Catch::Contains("crun:   request (CRUN_CONTROL_FILE): stop-job data corrupt\n"));
  const auto back = FailureReport::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->request == r.request);
  CHECK(back->to_json() == r.to_json());
  r.restarting = true;  // several nodes: the job restarts without the node that asked
  CHECK_THAT(r.format_text(), Catch::Contains("restarting the group"));
}

TEST_CASE("failure report: this node's stacks, in the JSON and back, the root cause's place in the text", "[failure_report]") {
  FailureReport r;
  r.rank = 5;
  r.local_rank = 1;
  r.host = "node1";
  r.pid = 99;
  r.status = ExitStatus::killed(SIGKILL);
  r.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'790'000'123'456));
  CHECK(r.to_json().find("\"stacks\"") == std::string::npos);  // none captured: no key
  RankStack other;
  other.rank = 4;
  other.pid = 98;
  other.threads = {{"__libc_pause (pause.c:29) [libc.so.6]", "all_reduce (comm.cc:10)", "main"}};
  other.error = "";
  RankStack root;
  root.rank = 5;
  root.local_rank = 1;
  root.pid = 99;
  root.threads = {{"?? (python3.11)"}};
  root.python_threads = {{"worker (x.py:3)"}, {"stuck_here (x.py:12)", "<module> (x.py:20)"}};
  root.error = "timed out after 5 s";
  r.stacks = {other, root};
  const auto back = FailureReport::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->to_json() == r.to_json());
  REQUIRE(back->stacks.size() == 2);
  CHECK(back->stacks[1].python_threads == root.python_threads);
  CHECK(back->stacks[1].error == root.error);
  CHECK(back->stacks[0].threads == other.threads);
  CHECK_THAT(r.format_text(), Catch::Contains("crun:   stack: rank 5 was in stuck_here (x.py:12)\n"));
  std::string bad = r.to_json();
  bad.replace(bad.find("\"threads\": [") + 12, 0, "7, ");
  CHECK_FALSE(FailureReport::from_json(bad));
}

TEST_CASE("failure report: the stacks grouped across ranks, in the text, the JSON and back", "[failure_report]") {
  FailureReport r;
  r.rank = 6;
  r.host = "h";
  r.status = ExitStatus::killed(SIGKILL);
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'790'000'000));
  CHECK(r.to_json().find("\"stack_groups\"") == std::string::npos);
  CHECK(r.format_text().find("stacks before the kill") == std::string::npos);
  std::vector<RankStack> stacks;
  for (int rank = 0; rank < 8; ++rank) {
    RankStack s;
    s.rank = rank;
    s.python_threads = {{rank == 6 ? "stuck_here (train.py:12)" : "all_reduce (train.py:40)", "main (train.py:80)"}};
    stacks.push_back(s);
  }
  r.stack_groups = group_stacks(stacks, 0);
  CHECK_THAT(r.format_text(), Catch::EndsWith("crun:   stacks before the kill, grouped across 8 rank(s):\n"
                                              "crun:     ranks 0-5, 7: all_reduce \xe2\x86\x90 main\n"
                                              "crun:     rank 6 (the odd one out): stuck_here \xe2\x86\x90 main\n"));
  const auto back = FailureReport::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->stack_groups == r.stack_groups);
  CHECK(back->to_json() == r.to_json());
  // Malformed groups make the whole report unreadable, as any other malformed field does.
  std::string bad = r.to_json();
  const auto at = bad.find("\"rank_count\": 7");
  REQUIRE(at != std::string::npos);
  bad.replace(at, 15, "\"rank_count\": 0");
  CHECK_FALSE(FailureReport::from_json(bad));
}

TEST_CASE("failure report: a rank's NCCL flight recorder dump, in the JSON and back; the root cause's in the text",
          "[failure_report]") {
  FailureReport r;
  r.rank = 1;
  r.host = "h";
  r.status = ExitStatus::killed(SIGKILL);
  RankStack whole;
  whole.rank = 1;
  whole.pid = 11;
  whole.flight_dump = "/run/attempt_0/flight_recorder/nccl_trace_rank_1";
  whole.flight_dump_bytes = 4096;
  RankStack missing;
  missing.rank = 2;
  missing.local_rank = 1;
  missing.pid = 12;
  missing.flight_dump = "/run/attempt_0/flight_recorder/nccl_trace_rank_2";
  missing.flight_error = "not written within 5 s";
  RankStack none;  // none asked for: no key
  none.rank = 3;
  none.local_rank = 2;
  none.pid = 13;
  r.stacks = {whole, missing, none};
  const std::string json = r.to_json();
  CHECK_THAT(json, Catch::Contains("\"flight_recorder\": {\n        \"bytes\": 4096,"));
  CHECK(nlohmann::json::parse(json)["stacks"][2].count("flight_recorder") == 0);
  const auto back = FailureReport::from_json(json);
  REQUIRE(back);
  CHECK(back->to_json() == json);
  REQUIRE(back->stacks.size() == 3);
  CHECK(back->stacks[1].flight_error == "not written within 5 s");
  CHECK_THAT(r.format_text(), Catch::Contains("crun:   NCCL flight recorder dump: "
                                              "/run/attempt_0/flight_recorder/nccl_trace_rank_1 (4096 bytes)\n"));
  std::string negative = json;
  negative.replace(negative.find("4096"), 4, "-409");
  CHECK_FALSE(FailureReport::from_json(negative));
}

TEST_CASE("failure report: the nodes whose stacks never came, in the text, the JSON and back", "[failure_report]") {
  FailureReport r;
  r.rank = 0;
  r.host = "h";
  r.status = ExitStatus::exited(3);
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'790'000'000));
  CHECK(r.to_json().find("stacks_missing_nodes") == std::string::npos);
  r.stacks_missing_nodes = {1, 3};
  CHECK_THAT(r.format_text(), Catch::EndsWith("crun:   no stacks before the kill came from node rank(s) 1, 3\n"));
  const auto back = FailureReport::from_json(r.to_json());
  REQUIRE(back);
  CHECK(back->stacks_missing_nodes == std::vector<int>{1, 3});
  CHECK(back->to_json() == r.to_json());
  std::string bad = r.to_json();
  const auto at = bad.find("\"stacks_missing_nodes\": [");
  REQUIRE(at != std::string::npos);
  bad.insert(at + 25, "-2, ");
  CHECK_FALSE(FailureReport::from_json(bad));
}
