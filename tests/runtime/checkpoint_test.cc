// worker_runtime/checkpoint: the file format, damage detection, fallback and atomic replacement.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/runtime/proc_harness.h"
#include "worker_runtime/checkpoint.h"

using namespace crun::rt;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir() {
  char tmpl[] = "/tmp/crun-rt-XXXXXX";
  return ::mkdtemp(tmpl);
}
}  // namespace

TEST_CASE("checkpoint encode/decode round trip and rejection of damage", "[checkpoint]") {
  Checkpoint c;
  c.step = 77;
  c.sections["weights"] = to_bytes(std::vector<float>{1, 2, 3});
  c.sections["meta"] = "epoch=3";
  const std::string bytes = encode_checkpoint(c);
  Checkpoint d = decode_checkpoint(bytes);
  CHECK(d.step == 77);
  CHECK(d.sections == c.sections);
  CHECK(from_bytes<float>(d.sections["weights"]) == std::vector<float>{1, 2, 3});

  std::string torn = bytes.substr(0, bytes.size() - 3);
  CHECK_THROWS_WITH(decode_checkpoint(torn), Catch::Contains("torn"));
  std::string flipped = bytes;
  flipped[flipped.size() - 2] ^= 0x10;
  CHECK_THROWS_WITH(decode_checkpoint(flipped), Catch::Contains("checksum"));
  std::string future = bytes;
  future[8] = 9;
  CHECK_THROWS_WITH(decode_checkpoint(future), Catch::Contains("version"));
  CHECK_THROWS_WITH(decode_checkpoint("garbage-garbage-garbage-garbage-garbage-garbage"), Catch::Contains("magic"));
}

TEST_CASE("loader falls back to the previous good checkpoint and keeps only `keep`", "[checkpoint]") {
  fs::path dir = temp_dir();
  for (std::uint64_t s = 1; s <= 3; ++s) {
    Checkpoint c;
    c.step = s;
    c.sections["x"] = std::string(100, static_cast<char>('0' + s));
    write_checkpoint_file(dir, c, 2);
  }
  CHECK_FALSE(fs::exists(dir / "checkpoint-000000000001.crun"));
  CHECK(load_latest_checkpoint_file(dir)->step == 3);
  // Corrupt the newest in place (bit flip) -> step 2 is used, the damage is reported.
  {
    std::fstream f(dir / "checkpoint-000000000003.crun", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(60);
    f.put('Z');
  }
  std::vector<std::string> rejected;
  auto c = load_latest_checkpoint_file(dir, &rejected);
  REQUIRE(c);
  CHECK(c->step == 2);
  REQUIRE(rejected.size() == 1);
  CHECK_THAT(rejected[0], Catch::Contains("checksum"));
  fs::remove_all(dir);
  CHECK_FALSE(load_latest_checkpoint_file(dir));
}

TEST_CASE("a checkpoint write killed midway leaves the previous checkpoint loadable", "[checkpoint]") {
  fs::path dir = temp_dir();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(crun::test::helper("ckpt_writer").c_str(), "ckpt_writer", dir.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WUNTRACED) == pid);  // event: the writer stopped mid-write
  REQUIRE(WIFSTOPPED(status));
  bool saw_tmp = false;
  for (auto& e : fs::directory_iterator(dir)) saw_tmp |= e.path().filename().string().ends_with(".tmp");
  CHECK(saw_tmp);
  ::kill(pid, SIGKILL);
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  std::vector<std::string> rejected;
  auto c = load_latest_checkpoint_file(dir, &rejected);
  REQUIRE(c);
  CHECK(c->step == 1);
  CHECK(c->sections.at("w") == std::string(1000, 'a'));
  CHECK(rejected.empty());  // the temp file is never a candidate
  fs::remove_all(dir);
}
