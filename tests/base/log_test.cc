// base/log: where a line goes (stderr, or the thread's redirect) and what it looks like.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"

using namespace crun;

namespace {

// Descriptor 2 is a pipe while it lives; read() takes what was written to it.
struct CapturedStderr {
  CapturedStderr() {
    REQUIRE(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
    saved = ::dup(2);
    REQUIRE(saved >= 0);
    REQUIRE(::dup2(p[1], 2) == 2);
  }
  ~CapturedStderr() {
    ::dup2(saved, 2);
    ::close(saved);
    ::close(p[0]);
    ::close(p[1]);
  }
  std::string read() {
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
    return got;
  }
  int p[2];
  int saved;
};

struct Collect final : LogSink {
  void write_log(std::string_view text) override { lines.emplace_back(text); }
  std::vector<std::string> lines;
};

}  // namespace

TEST_CASE("a line goes to stderr with the program's name, text as it is", "[log]") {
  CapturedStderr err;
  log_line("hosting the store at 127.0.0.1:29400");
  log_text("two\nlines\n");
  CHECK(err.read() == "crun: hosting the store at 127.0.0.1:29400\ntwo\nlines\n");
  set_log_program("crun-keeper");
  log_line("x");
  set_log_program("crun");
  CHECK(err.read() == "crun-keeper: x\n");
}

TEST_CASE("a redirect takes the lines of its own thread only, and redirects nest", "[log]") {
  CapturedStderr err;
  Collect outer, inner;
  {
    LogRedirect a(outer);
    log_line("one");
    {
      LogRedirect b(inner);
      log_line("two");
      std::thread([] { log_line("other thread"); }).join();
    }
    log_text("three\n");
  }
  log_line("four");
  CHECK(outer.lines == std::vector<std::string>{"crun: one\n", "three\n"});
  CHECK(inner.lines == std::vector<std::string>{"crun: two\n"});
  CHECK(err.read() == "crun: other thread\ncrun: four\n");
}

TEST_CASE("stderr_without_blocking drops what a full stderr cannot take, and never waits", "[log]") {
  CapturedStderr err;
  LogRedirect r(stderr_without_blocking());
  const std::string text(1000, 'x');
  for (int i = 0; i < 200; ++i) log_line(text);  // 200 kB into a 64 KiB pipe nobody drains
  const std::string got = err.read();
  CHECK(got.size() >= text.size());
  CHECK(got.size() < 200 * (text.size() + 7));
  CHECK(got.size() % (text.size() + 7) == 0);  // whole lines only
}
