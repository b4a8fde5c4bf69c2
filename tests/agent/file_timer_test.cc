// torch's file timer: the request format, the table of open scopes, and the server on a real FIFO
// driven by a real io_context.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/file_timer.h"
#include "agent/file_timer_server.h"

using namespace crun;
namespace fs = std::filesystem;

namespace {

std::string request(int pid, const std::string& scope, double expiration, int signal = 9) {
  return "{\"version\": 1, \"pid\": " + std::to_string(pid) + ", \"scope_id\": \"" + scope +
         "\", \"expiration_time\": " + std::to_string(expiration) + ", \"signal\": " + std::to_string(signal) + "}";
}

FileTimerRequest acquire(int pid, const std::string& scope, double t) {
  return FileTimerRequest{pid, scope, t, 9};
}
FileTimerRequest release(int pid, const std::string& scope) { return FileTimerRequest{pid, scope, -1, 0}; }

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("a request line as FileTimerClient writes it", "[file_timer]") {
  auto r = parse_file_timer_request(request(4242, "train_step", 1700000000.5, 9));
  CHECK(r.pid == 4242);
  CHECK(r.scope_id == "train_step");
  CHECK(r.expiration_time == 1700000000.5);
  CHECK(r.signal == 9);
  // release(): expiration -1, signal 0
  auto rel = parse_file_timer_request(R"({"version": 1, "pid": 7, "scope_id": "s", "expiration_time": -1, "signal": 0})");
  CHECK(rel.expiration_time < 0);
}

TEST_CASE("malformed requests name what is wrong", "[file_timer]") {
  auto bad = [](const std::string& line, const std::string& what) {
    INFO(line);
    CHECK_THROWS_WITH(parse_file_timer_request(line), Catch::Contains(what));
  };
  bad("not json", "not JSON");
  bad("[1,2]", "not a JSON object");
  bad(R"({"scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\"");
  bad(R"({"pid": "12", "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\" is not an integer");
  bad(R"({"pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})", "not a process id");
  bad(R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})", "out of range");
  bad(R"({"pid": 5, "scope_id": 3, "expiration_time": 1, "signal": 9})", "\"scope_id\" is not a string");
  bad(R"({"pid": 5, "scope_id": "s", "expiration_time": "soon", "signal": 9})", "\"expiration_time\"");
  bad(R"({"pid": 5, "scope_id": "s", "expiration_time": 1})", "\"signal\"");
  bad(request(5, std::string(FileTimerTable::kMaxScopeIdBytes + 1, 'x'), 1), "too long");
}

TEST_CASE("the table acquires, moves, releases and expires scopes, earliest first", "[file_timer]") {
  FileTimerTable t;
  CHECK_FALSE(t.next_expiry());
  CHECK(t.apply(acquire(10, "a", 30)));
  CHECK(t.apply(acquire(11, "b", 20)));
  CHECK(t.apply(acquire(10, "c", 25)));
  CHECK(t.next_expiry() == 20);
  CHECK(t.apply(acquire(11, "b", 40)));  // acquiring again moves the deadline
  CHECK(t.next_expiry() == 25);
  CHECK(t.apply(release(10, "c")));
  CHECK(t.apply(release(10, "never-acquired")));
  CHECK(t.size() == 2);
  CHECK(t.expire(29.9).empty());
  auto due = t.expire(45);
  REQUIRE(due.size() == 2);
  CHECK(due[0].scope_id == "a");
  CHECK(due[1].scope_id == "b");
  CHECK(t.size() == 0);
  CHECK_FALSE(t.next_expiry());
}

TEST_CASE("a finished worker's scopes are forgotten, and only its own", "[file_timer]") {
  FileTimerTable t;
  t.apply(acquire(10, "a", 5));
  t.apply(acquire(10, "b", 6));
  t.apply(acquire(12, "a", 7));
  t.forget(10);
  CHECK(t.size() == 1);
  CHECK(t.next_expiry() == 7);
}

TEST_CASE("a worker cannot grow the table past its bounds", "[file_timer]") {
  FileTimerTable t;
  for (std::size_t i = 0; i < FileTimerTable::kMaxScopesPerPid; ++i) REQUIRE(t.apply(acquire(10, std::to_string(i), 100)));
  CHECK_FALSE(t.apply(acquire(10, "one more", 100)));
  CHECK(t.apply(acquire(10, "0", 200)));  // moving a held scope is fine
  CHECK(t.apply(release(10, "1")));
  CHECK(t.apply(acquire(10, "one more", 100)));  // room again
  CHECK(t.size() == FileTimerTable::kMaxScopesPerPid);
}

namespace {

struct ServerRun {
  ServerRun() {
    dir = fs::temp_directory_path() / ("crun_file_timer_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    path = (dir / "timer").string();
  }
  ~ServerRun() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::unique_ptr<FileTimerServer> start(std::vector<int> ours) {
    FileTimerServer::Callbacks cb;
    cb.owns = [ours](int pid) { return std::find(ours.begin(), ours.end(), pid) != ours.end(); };
    cb.on_expired = [this](const FileTimerExpiry& e) {
      expired.push_back(e);
      io.stop();
    };
    cb.log = [this](const std::string& line) { logs.push_back(line); };
    return std::make_unique<FileTimerServer>(io, path, cb);
  }
  // Writes as FileTimerClient does: a non-blocking open for writing, one write per request.
  void send(const std::string& text) {
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  // Runs the loop until a scope expires or `bound` passes.
  void run_for(std::chrono::milliseconds bound) {
    io.restart();
    io.run_for(bound);
  }
  fs::path dir;
  std::string path;
  boost::asio::io_context io;
  std::vector<FileTimerExpiry> expired;
  std::vector<std::string> logs;
};

}  // namespace

TEST_CASE("the server reports an overdue scope within milliseconds of its deadline", "[file_timer]") {
  ServerRun run;
  auto server = run.start({4242});
  struct stat st {};
  REQUIRE(::stat(run.path.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  const double deadline = wall_now() + 0.2;
  run.send(request(4242, "released", deadline) + "\n" + request(4242, "released", -1, 0) + "\n");
  run.send(request(4242, "step", deadline) + "\n");
  auto t0 = std::chrono::steady_clock::now();
  run.run_for(std::chrono::seconds(5));
  REQUIRE(run.expired.size() == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK(run.expired[0].request.pid == 4242);
  CHECK(run.expired[0].request.scope_id == "step");
  CHECK(run.expired[0].request.signal == 9);
  CHECK(run.expired[0].overdue >= std::chrono::milliseconds(0));
  CHECK(run.expired[0].overdue < std::chrono::milliseconds(1000));
  server.reset();
  CHECK_FALSE(fs::exists(run.path));  // the FIFO goes with the server
}

TEST_CASE("the server ignores strangers, garbage and oversized lines with a log line each", "[file_timer]") {
  ServerRun run;
  auto server = run.start({4242});
  const double soon = wall_now() + 0.1;
  run.send("garbage\n");
  run.send(request(999, "not ours", soon) + "\n");
  run.send(std::string(PIPE_BUF + 10, 'x'));  // no newline yet: one line in two writes
  run.send("yyy\n" + request(4242, "after the junk", soon) + "\n");
  run.run_for(std::chrono::seconds(5));
  REQUIRE(run.expired.size() == 1);
  CHECK(run.expired[0].request.scope_id == "after the junk");
  std::string all;
  for (auto& l : run.logs) all += l + "\n";
  INFO(all);
  CHECK(run.logs.size() == 3);
  CHECK_THAT(all, Catch::Contains("malformed") && Catch::Contains("pid 999") && Catch::Contains("longer than"));
}

TEST_CASE("a path that is not a FIFO is refused, not replaced", "[file_timer]") {
  ServerRun run;
  { std::ofstream(run.path) << "precious"; }
  boost::asio::io_context io;
  CHECK_THROWS_WITH(FileTimerServer(io, run.path, {}), Catch::Contains(run.path) && Catch::Contains("not a FIFO"));
  CHECK(fs::file_size(run.path) == 8);
  CHECK_THROWS_WITH(FileTimerServer(io, "/nonexistent-dir/timer", {}), Catch::Contains("cannot create"));
}

TEST_CASE("a FIFO left by an earlier run is replaced", "[file_timer]") {
  ServerRun run;
  REQUIRE(::mkfifo(run.path.c_str(), 0644) == 0);
  auto server = run.start({1});
  struct stat st {};
  REQUIRE(::stat(run.path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("lines arrive whole however the bytes are cut; a line over the bound is dropped once", "[file_timer]") {
  LineSplitter lines(8);
  std::vector<std::string> got;
  int oversized = 0;
  const auto on_line = [&](std::string_view l) { got.emplace_back(l); };
  const auto on_big = [&] { ++oversized; };
  for (char c : std::string("ab\ncdefgh\n\n123456789\nxy")) lines.feed(std::string_view(&c, 1), on_line, on_big);
  CHECK(got == std::vector<std::string>{"ab", "cdefgh", ""});
  CHECK(oversized == 1);
  CHECK(lines.held() == 2);  // "xy", waiting for its newline
  lines.feed("z\n0123456789abcdef0123\nok\n", on_line, on_big);
  CHECK(got.back() == "ok");
  CHECK(got.at(3) == "xyz");
  CHECK(oversized == 2);
  CHECK(lines.held() == 0);
}
