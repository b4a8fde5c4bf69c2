// agent/console_sink: writes never block the loop, the shared description's flags stay as they
// were, everything arrives in order once the reader reads, and a reader that is gone drops the rest.
#include <fcntl.h>
#include <pty.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "agent/console_sink.h"
#include "tests/support/temp_dir.h"

using crun::ConsoleSink;
namespace asio = boost::asio;

namespace {

// 3 MiB with a position-dependent pattern: reordered or lost bytes show.
std::string pattern(std::size_t size) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
  return s;
}

// Reads `reader` (non-blocking) while the loop runs, until `want` bytes came or 20 s passed.
std::string read_all(asio::io_context& io, int reader, std::size_t want) {
  ::fcntl(reader, F_SETFL, ::fcntl(reader, F_GETFL) | O_NONBLOCK);
  std::string got;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::read(reader, buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    io.poll();
    if (n <= 0) io.run_one_for(std::chrono::milliseconds(10));  // the sink's wait for room, bounded
  }
  return got;
}

// Writes `data` in 64 KiB pieces to a stream nobody reads yet; each write must return at once.
void write_unread(ConsoleSink& sink, const std::string& data) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t at = 0; at < data.size(); at += 65536) sink.write(data.data() + at, std::min<std::size_t>(65536, data.size() - at));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // a blocking write never returns here
}

void check_stream(int writer, int reader) {
  asio::io_context io;
  const int flags = ::fcntl(writer, F_GETFL);
  const std::string data = pattern(3u << 20);
  ConsoleSink sink(io, writer);
  write_unread(sink, data);
  CHECK(sink.backlogged());
  CHECK(sink.backlog_bytes() > ConsoleSink::kHighWater);
  CHECK(::fcntl(writer, F_GETFL) == flags);  // others share the description: no O_NONBLOCK there
  bool drained = false;
  sink.when_drained([&] { drained = true; });
  CHECK_FALSE(drained);
  const std::string got = read_all(io, reader, data.size());
  CHECK(got.size() == data.size());
  CHECK(got == data);
  CHECK(drained);
  CHECK(sink.backlog_bytes() == 0);
  CHECK_FALSE(sink.backlogged());
}

}  // namespace

TEST_CASE("a pipe nobody reads: writes return at once, and every byte arrives in order once it reads", "[console_sink]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  check_stream(p[1], p[0]);
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("a terminal nobody reads: its own non-blocking description, the shared one's flags untouched", "[console_sink]") {
  int master = -1, slave = -1;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  termios raw{};
  REQUIRE(::tcgetattr(slave, &raw) == 0);
  ::cfmakeraw(&raw);  // bytes as written (no newline translation, no echo)
  REQUIRE(::tcsetattr(slave, TCSANOW, &raw) == 0);
  check_stream(slave, master);
  ::close(master);
  ::close(slave);
}

TEST_CASE("a socket nobody reads (a journal's stream): writes return at once, nothing lost", "[console_sink]") {
  int s[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) == 0);
  check_stream(s[1], s[0]);
  ::close(s[0]);
  ::close(s[1]);
}

TEST_CASE("a regular file is written through, with no backlog", "[console_sink]") {
  crun::test::TempDir dir;
  const std::string path = (dir.path / "out").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "first\n", 6) == 6);
  asio::io_context io;
  ConsoleSink sink(io, fd);
  const std::string data = pattern(2u << 20);
  sink.write(data.data(), data.size());
  CHECK(sink.backlog_bytes() == 0);
  ::close(fd);
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string got(data.size() + 6, '\0');
  CHECK(::read(in, got.data(), got.size()) == static_cast<ssize_t>(got.size()));
  CHECK(got == "first\n" + data);  // appended after what was there: the file's offset kept
  ::close(in);
}

TEST_CASE("a reader that is gone: the backlog is dropped and readers waiting on the sink go on", "[console_sink]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  asio::io_context io;
  ConsoleSink sink(io, p[1]);
  write_unread(sink, pattern(3u << 20));
  REQUIRE(sink.backlogged());
  bool drained = false;
  sink.when_drained([&] { drained = true; });
  ::close(p[0]);  // the reader leaves: the next write fails with EPIPE (SIGPIPE ignored, as in crun)
  const auto old = ::signal(SIGPIPE, SIG_IGN);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!drained && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(50));
  CHECK(drained);
  CHECK(sink.backlog_bytes() == 0);
  sink.write("more\n", 5);  // dropped, not kept
  CHECK(sink.backlog_bytes() == 0);
  sink.flush();  // returns: nothing to wait for
  ::signal(SIGPIPE, old);
  ::close(p[1]);
}

TEST_CASE("flush() waits until the stream has taken everything", "[console_sink]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  asio::io_context io;
  ConsoleSink sink(io, p[1]);
  const std::string data = pattern(3u << 20);
  write_unread(sink, data);
  REQUIRE(sink.backlog_bytes() > 0);
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; got.size() < data.size() && (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  });
  sink.flush();
  CHECK(sink.backlog_bytes() == 0);
  reader.join();
  CHECK(got == data);
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("a pipe shared with another writer: a line of the sink is never split by the other's", "[console_sink]") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  asio::io_context io;
  ConsoleSink sink(io, p[1]);
  std::string data;  // 4,000 numbered lines of uneven length (~230 KB): no write fits a page exactly
  for (int i = 0; i < 4000; ++i) data += "line " + std::to_string(i) + " " + std::string(40 + i % 37, 'x') + "\n";
  write_unread(sink, data);
  REQUIRE(sink.backlog_bytes() > 0);
  // The other writer (another thread or process of the job) writes one short line whenever the
  // pipe has room, while the reader drains the pipe in pieces that end inside lines.
  const int other = ::open(("/proc/self/fd/" + std::to_string(p[1])).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(other >= 0);
  ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
  std::string got;
  int others = 0;
  char buf[3001];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    if (sink.backlog_bytes() == 0) break;
    if (::write(other, "OTHER\n", 6) == 6) ++others;
    io.poll();
    if (n <= 0) io.run_one_for(std::chrono::milliseconds(10));  // the sink's wait for room, bounded
  }
  ::close(other);
  REQUIRE(sink.backlog_bytes() == 0);
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  REQUIRE(others > 20);
  std::string mine;  // the sink's lines, the other writer's taken out: each must be whole
  int seen_others = 0;
  std::size_t at = 0;
  for (std::size_t nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = got.substr(at, nl - at);
    if (line == "OTHER") {
      ++seen_others;
      continue;
    }
    INFO("a line split by the other writer: " << line);
    REQUIRE(line.rfind("line ", 0) == 0);
    REQUIRE(line.find("OTHER") == std::string::npos);
    mine += line + "\n";
  }
  CHECK(at == got.size());
  CHECK(seen_others == others);
  CHECK(mine == data);
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("same_stream: two descriptors of one file (2>&1), not two pipes", "[console_sink]") {
  int a[2], b[2];
  REQUIRE(::pipe2(a, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(b, O_CLOEXEC) == 0);
  const int dup = ::fcntl(a[1], F_DUPFD_CLOEXEC, 0);
  const int reopened = ::open(("/proc/self/fd/" + std::to_string(a[1])).c_str(), O_WRONLY | O_CLOEXEC);
  CHECK(ConsoleSink::same_stream(a[1], dup));
  CHECK(ConsoleSink::same_stream(a[1], reopened));  // another description of the same pipe
  CHECK_FALSE(ConsoleSink::same_stream(a[1], b[1]));
  CHECK_FALSE(ConsoleSink::same_stream(a[1], -1));
  for (int fd : {a[0], a[1], b[0], b[1], dup, reopened}) ::close(fd);
}
