// agent/state_directory: real files, a real inotify watch on a real io_context.
#include "agent/state_directory.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace crun;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A worker's save: a dot-name, then the rename that commits it.
void save(const fs::path& dir, const std::string& name, const std::string& text) {
  write_file(dir / ("." + name + ".tmp"), text);
  fs::rename(dir / ("." + name + ".tmp"), dir / name);
}

// Runs the loop until on_change has been called `n` times in all (bounded).
bool changes(boost::asio::io_context& io, const int& count, int n) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (count < n && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  return count >= n;
}

}  // namespace

TEST_CASE("the job root: run id and pid in its name, 0700, a leftover of the same name replaced", "[state_directory]") {
  CHECK(StateDirectory::job_root_for("/dev/shm", "job/7", 42) == "/dev/shm/crun-state-job_7-42");
  test::TempDir tmp;
  boost::asio::io_context io;
  const fs::path root = StateDirectory::job_root_for(tmp.path.string(), "r", 1);
  fs::create_directories(root / "rank-0");
  write_file(root / "rank-0" / "stale", "x");
  StateDirectory a(io, root, 1000);
  StateDirectory b(io, StateDirectory::job_root_for(tmp.path.string(), "r", 2), 1000);
  CHECK_FALSE(fs::exists(root / "rank-0" / "stale"));
  struct stat st;
  REQUIRE(::stat(root.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(a.rank_dir(0) != b.rank_dir(0));
  CHECK(fs::is_directory(root / "replicas"));
  a.remove();
  CHECK_FALSE(fs::exists(root));
  CHECK(fs::exists(b.job_root()));
}

TEST_CASE("a rename commits; the committed link keeps the inode; delete and in-place writes drop", "[state_directory]") {
  test::TempDir tmp;
  boost::asio::io_context io;
  StateDirectory s(io, tmp.path / "job", 1000);
  int count = 0;
  int last_rank = -1;
  s.on_change([&](int rank) {
    ++count;
    last_rank = rank;
  });
  const fs::path dir = s.rank_dir(2);
  write_file(dir / ".half.tmp", "never renamed");
  save(dir, "ckpt", "v1");
  REQUIRE(changes(io, count, 1));
  CHECK(last_rank == 2);
  auto c = s.committed(2);
  REQUIRE(c.size() == 1);
  CHECK(c[0].name == "ckpt");
  CHECK(c[0].size == 2);
  CHECK(c[0].sequence == 1);
  CHECK(c[0].path == s.job_root() / ".committed" / "rank-2" / "ckpt");
  CHECK(read_file(c[0].path) == "v1");
  CHECK(s.sequence(2) == 1);

  save(dir, "ckpt", "v2!");  // a new version
  REQUIRE(changes(io, count, 2));
  CHECK(read_file(s.committed(2).at(0).path) == "v2!");

  // Written in place after its commit: torn, dropped.
  const int fd = ::open((dir / "ckpt").c_str(), O_WRONLY | O_TRUNC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "x", 1) == 1);
  ::close(fd);
  REQUIRE(changes(io, count, 3));
  CHECK(s.committed(2).empty());

  save(dir, "other", "o");
  REQUIRE(changes(io, count, 4));
  fs::remove(dir / "other");
  REQUIRE(changes(io, count, 5));
  CHECK(s.committed(2).empty());
  CHECK(s.sequence(2) == 5);
}

TEST_CASE("prepare_for_start: exactly the committed files, dot-files and direct writes gone", "[state_directory]") {
  test::TempDir tmp;
  boost::asio::io_context io;
  StateDirectory s(io, tmp.path / "job", 1000);
  const fs::path dir = s.rank_dir(0);
  save(dir, "keep", "k");
  write_file(dir / ".torn.tmp", "half");
  write_file(dir / "direct", "no rename");
  fs::create_directories(dir / "sub" / "deeper");
  s.prepare_for_start({0, 1});  // reads the pending events first
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"keep"});
  CHECK(read_file(dir / "keep") == "k");
  CHECK(fs::is_directory(s.job_root() / "rank-1"));
}

TEST_CASE("over --state-max-bytes: refused, the previous version back under its name", "[state_directory]") {
  test::TempDir tmp;
  boost::asio::io_context io;
  StateDirectory s(io, tmp.path / "job", 10);
  const fs::path dir = s.rank_dir(0);
  save(dir, "a", "1234");
  s.prepare_for_start({0});       // (reads the events: each save is seen by itself)
  save(dir, "a", "12345678901");  // 11 bytes: over
  save(dir, "b", "1234567");      // 4 + 7: over
  s.prepare_for_start({0});
  const auto c = s.committed(0);
  REQUIRE(c.size() == 1);
  CHECK(c[0].name == "a");
  CHECK(read_file(dir / "a") == "1234");
  CHECK_FALSE(fs::exists(dir / "b"));
}

TEST_CASE("install: a committed set fetched elsewhere replaces the rank's, restored at the start", "[state_directory]") {
  test::TempDir tmp;
  boost::asio::io_context io;
  StateDirectory s(io, tmp.path / "job", 1000);
  const fs::path dir = s.rank_dir(4);
  save(dir, "mine", "old");
  s.prepare_for_start({4});
  write_file(s.job_root() / "replicas" / "w.part", "weights");
  s.install(4, {{"w", s.job_root() / "replicas" / "w.part"}}, 17);
  CHECK(s.sequence(4) == 17);
  const auto c = s.committed(4);
  REQUIRE(c.size() == 1);
  CHECK(c[0].name == "w");
  CHECK(c[0].sequence == 17);
  s.prepare_for_start({4});
  CHECK(read_file(dir / "w") == "weights");
  CHECK_FALSE(fs::exists(dir / "mine"));
  CHECK_THROWS_AS(s.install(4, {{".hidden", s.job_root() / "x"}}, 18), std::invalid_argument);
}

TEST_CASE("no inotify instance to be had: one line, and the directories are read at each start", "[state_directory]") {
  test::TempDir tmp;
  boost::asio::io_context io;
  boost::asio::posix::stream_descriptor reactor(io);  // the loop's own descriptors, made first
  // Every descriptor taken: inotify_init1 fails with EMFILE, as when the user's instances are.
  rlimit was{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &was) == 0);
  rlimit low = was;
  low.rlim_cur = std::min<rlim_t>(was.rlim_cur, 512);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  std::unique_ptr<StateDirectory> made;
  std::string error;
  try {
    made = std::make_unique<StateDirectory>(io, tmp.path / "job", 10);
  } catch (const std::exception& e) {
    error = e.what();
  }
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &was);
  INFO(error);
  REQUIRE(made);
  StateDirectory& s = *made;
  const fs::path dir = s.rank_dir(0);
  save(dir, "a", "1234");
  write_file(dir / ".torn.tmp", "half");
  s.prepare_for_start({0});
  REQUIRE(s.committed(0).size() == 1);
  CHECK(s.committed(0)[0].name == "a");
  save(dir, "a", "12345678901");  // over the bound: refused at the start, the previous version back
  s.prepare_for_start({0});
  CHECK(read_file(dir / "a") == "1234");
  CHECK_FALSE(fs::exists(dir / ".torn.tmp"));
  fs::remove(dir / "a");
  s.prepare_for_start({0});
  CHECK(s.committed(0).empty());
}
