// agent/line_router: worker output split into prefixed lines for the console, raw bytes for the file.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "agent/line_router.h"

using namespace crun;

namespace {
std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}
}  // namespace

TEST_CASE("line router: whole prefixed lines, partial last line flushed, tail kept", "[line_router]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    LineRouter r(StreamRoute{p[1], "[default1]:", -1, 2, "", nullptr});
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

TEST_CASE("line router: raw bytes to the file, unprefixed console", "[line_router]") {
  char path[] = "/tmp/crun-router-XXXXXX";
  const int file = ::mkstemp(path);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    LineRouter r(StreamRoute{p[1], "", file, 0, "", nullptr});
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

// torch's --duplicate-std{out,err}-filters: two ranks' console lines that contain a filter also go,
// prefixed, to one shared file, closed with the last router.
TEST_CASE("line router: console lines matching a filter are duplicated to the shared sink", "[line_router]") {
  int console[2], dup[2];
  REQUIRE(::pipe(console) == 0);
  REQUIRE(::pipe(dup) == 0);
  {
    auto sink = std::make_shared<DuplicateSink>(dup[1], std::vector<std::string>{"apple", "a,b"}, "filtered_stdout.log");
    LineRouter r0(StreamRoute{console[1], "[default0]:", -1, 0, "", sink});
    LineRouter r1(StreamRoute{console[1], "[default1]:", -1, 0, "", sink});
    sink.reset();  // the routers own it now
    r0.feed("pear\napp", 8);
    r1.feed("a,b\n", 4);
    r0.feed("le pie\nplum\n", 12);
    r0.feed("apple at the end", 16);
    r0.finish();
    r1.finish();
  }  // the last router closed the sink's fd
  ::close(console[1]);
  CHECK(read_fd(dup[0]) == "[default1]:a,b\n[default0]:apple pie\n[default0]:apple at the end\n");
  CHECK(read_fd(console[0]) ==
        "[default0]:pear\n[default1]:a,b\n[default0]:apple pie\n[default0]:plum\n[default0]:apple at the end\n");
  ::close(dup[0]);
  ::close(console[0]);
}
