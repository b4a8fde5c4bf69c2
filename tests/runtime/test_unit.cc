// In-process unit tests: sampler arithmetic, checkpoint format, hashes, 16-bit conversions.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/runtime/proc_harness.h"
#include "worker_runtime/checkpoint.h"
#include "worker_runtime/hash.h"
#include "worker_runtime/sampler.h"
#include "worker_runtime/types.h"

using namespace crun::rt;
namespace fs = std::filesystem;
using V = std::vector<std::size_t>;

namespace {
fs::path temp_dir() {
  char tmpl[] = "/tmp/crun-rt-XXXXXX";
  return ::mkdtemp(tmpl);
}
}  // namespace

// Reference values computed with torch 1.13 DistributedSampler(shuffle=False).
TEST_CASE("sampler pads from the start like torch", "[sampler]") {
  CHECK(DistributedSampler(10, 3, 0, false).indices() == V{0, 3, 6, 9});
  CHECK(DistributedSampler(10, 3, 1, false).indices() == V{1, 4, 7, 0});
  CHECK(DistributedSampler(10, 3, 2, false).indices() == V{2, 5, 8, 1});
  CHECK(DistributedSampler(2, 5, 3, false).indices() == V{1});
  CHECK(DistributedSampler(2, 5, 4, false).indices() == V{0});
  CHECK(DistributedSampler(10, 3, 0, false).total_size() == 12);
}

TEST_CASE("sampler drop_last truncates like torch", "[sampler]") {
  DistributedSampler s(10, 3, 1, false, 0, true);
  CHECK(s.num_samples() == 3);
  CHECK(s.indices() == V{1, 4, 7});
  CHECK(DistributedSampler(9, 3, 2, false, 0, true).indices() == V{2, 5, 8});
  CHECK(DistributedSampler(2, 3, 0, false, 0, true).num_samples() == 0);
}

TEST_CASE("sampler shuffle: seeded per epoch, disjoint cover across ranks", "[sampler]") {
  const std::size_t n = 1001;
  for (std::uint64_t epoch : {0, 1}) {
    std::multiset<std::size_t> all;
    for (int r = 0; r < 4; ++r) {
      DistributedSampler s(n, 4, r, true, 42);
      s.set_epoch(epoch);
      auto idx = s.indices();
      CHECK(idx.size() == 251);
      CHECK(idx == [&] { DistributedSampler t(n, 4, r, true, 42); t.set_epoch(epoch); return t.indices(); }());
      all.insert(idx.begin(), idx.end());
    }
    CHECK(all.size() == 1004);
    for (std::size_t i = 0; i < n; ++i) CHECK(all.count(i) >= 1);
  }
  DistributedSampler a(n, 1, 0, true, 42), b(n, 1, 0, true, 42);
  b.set_epoch(1);
  CHECK(a.indices() != b.indices());
  CHECK_THROWS(DistributedSampler(10, 2, 2));
}

TEST_CASE("sha256 and fnv1a64 known answers", "[hash]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
}

TEST_CASE("half and bfloat16 conversions round to nearest even", "[types]") {
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(float_to_half(65504.0f) == 0x7BFF);
  CHECK(float_to_half(1e6f) == 0x7C00);
  CHECK(half_to_float(float_to_half(5.960464477539063e-08f)) == 5.960464477539063e-08f);
  CHECK(bf16_to_float(float_to_bf16(3.0f)) == 3.0f);
  CHECK(float_to_bf16(1.00390625f) == 0x3F80);  // tie -> even
  CHECK(dtype_size(DType::kBFloat16) == 2);
}

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
