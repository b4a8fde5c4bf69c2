// base/fd_io: write_all writes everything; write_without_blocking never waits.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <string>
#include <thread>

#include "base/fd_io.h"

using namespace crun;

TEST_CASE("a log line to a pipe nobody drains is dropped without blocking", "[fd_io]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  const std::string line(1000, 'x');
  int written = 0, dropped = 0;
  for (int i = 0; i < 200; ++i) (write_without_blocking(p[1], line) ? written : dropped)++;
  CHECK(written >= 1);
  CHECK(dropped >= 1);  // 200 kB do not fit a 64 KiB pipe; we got here, so nothing blocked
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("write_all waits for a non-blocking pipe to drain and writes every byte", "[fd_io]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
  const std::string data(1 << 20, 'y');  // 16 times a pipe's default capacity
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) != 0) {
      if (n > 0) {
        got.append(buf, static_cast<std::size_t>(n));
      } else if (errno == EAGAIN) {
        pollfd pfd{p[0], POLLIN, 0};
        if (::poll(&pfd, 1, 10000) == 0) break;  // bounded: the writer stalled (the CHECK fails)
      } else if (errno != EINTR) {
        break;
      }
    }
  });
  CHECK(write_all(p[1], data.data(), data.size()));
  ::close(p[1]);
  reader.join();
  CHECK(got == data);
  ::close(p[0]);
}

TEST_CASE("write_all reports a write that fails, with errno", "[fd_io]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  ::close(p[0]);  // nobody will ever read: EPIPE (SIGPIPE ignored below)
  std::signal(SIGPIPE, SIG_IGN);
  errno = 0;
  CHECK_FALSE(write_all(p[1], "x", 1));
  CHECK(errno == EPIPE);
  ::close(p[1]);
}
