// Multi-process tests: real worker processes on 127.0.0.1, started by proc_harness.
#include <catch2/catch.hpp>
#include <fstream>
#include <stdlib.h>

#include <filesystem>

#include "tests/runtime/proc_harness.h"

using crun::test::helper;
using crun::test::run_ranks;

namespace {

void expect_all_pass(const crun::test::RunResult& res, const std::string& scenario) {
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  for (const auto& r : res.ranks) {
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("PASS " + scenario) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("collectives, every op and dtype, world size 1", "[collectives][w1]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 1), "collectives");
}
TEST_CASE("collectives, every op and dtype, world size 2", "[collectives][w2]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 2), "collectives");
}
TEST_CASE("collectives, every op and dtype, world size 3", "[collectives][w3]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 3), "collectives");
}
TEST_CASE("collectives, every op and dtype, world size 4", "[collectives][w4]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 4), "collectives");
}

TEST_CASE("collectives with the mesh moving 8 KiB per round, world sizes 2 and 3", "[collectives][mesh_rounds]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 2, {{"CRUN_TEST_MESH_SCRATCH", "8192"}}), "collectives");
  expect_all_pass(run_ranks({helper("rt_worker"), "collectives"}, 3, {{"CRUN_TEST_MESH_SCRATCH", "8192"}}), "collectives");
}

TEST_CASE("a killed peer makes the collective fail instead of hanging", "[peer_killed]") {
  auto res = run_ranks({helper("rt_worker"), "peer_killed"}, 2);
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  CHECK(res.ranks[0].exit_code == 0);
  CHECK(res.ranks[0].output.find("got error:") != std::string::npos);
  CHECK(res.ranks[0].output.find("PASS peer_killed") != std::string::npos);
  CHECK(res.ranks[1].exit_code == 128 + 9);
}

TEST_CASE("a stalled peer makes the collective time out with an error", "[peer_stalled]") {
  auto res = run_ranks({helper("rt_worker"), "peer_stalled"}, 2);
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  CHECK(res.ranks[0].exit_code == 0);
  CHECK(res.ranks[0].output.find("got error:") != std::string::npos);
  CHECK(res.ranks[0].output.find("PASS peer_stalled") != std::string::npos);
}

TEST_CASE("gradient bucketer averages in order whatever the ready order, metrics reduce", "[bucketer]") {
  expect_all_pass(run_ranks({helper("rt_worker"), "bucketer"}, 2), "bucketer");
  expect_all_pass(run_ranks({helper("rt_worker"), "bucketer"}, 3), "bucketer");
}

TEST_CASE("group checkpoint save/load and heartbeat", "[checkpoint_group]") {
  char tmpl[] = "/tmp/crun-ckpt-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  // Each rank gets its own heartbeat file, as crun makes it: 16 zero bytes.
  for (const char* r : {"0", "1"}) std::ofstream(dir + "/hb" + r) << std::string(16, '\0');
  expect_all_pass(run_ranks({"/bin/sh", "-c", "CRUN_HEARTBEAT_FILE=" + dir + "/hb$RANK exec \"$0\" \"$@\"",
                             helper("rt_worker"), "checkpoint", dir},
                            2),
                  "checkpoint");
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoints in each rank's CRUN_STATE_DIR: own copies, a lost or torn rank still loads the newest",
          "[state_checkpoint]") {
  char tmpl[] = "/tmp/crun-state-ckpt-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  for (const char* r : {"0", "1", "2"}) std::filesystem::create_directories(dir + "/rank-" + r);
  expect_all_pass(run_ranks({"/bin/sh", "-c", "CRUN_STATE_DIR=" + dir + "/rank-$RANK exec \"$0\" \"$@\"",
                             helper("rt_worker"), "state_checkpoint"},
                            3),
                  "state_checkpoint");
  std::filesystem::remove_all(dir);
}

TEST_CASE("init fails with a clear error when the environment is incomplete", "[init]") {
  // Only RANK set: the worker must refuse, naming the missing variables.
  auto res = run_ranks({helper("rt_worker"), "init"}, 1, {{"WORLD_SIZE", ""}, {"MASTER_PORT", ""}});
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  CHECK(res.ranks[0].exit_code == 1);
  CHECK(res.ranks[0].output.find("WORLD_SIZE is not set") != std::string::npos);
  CHECK(res.ranks[0].output.find("MASTER_PORT is not set") != std::string::npos);
}

TEST_CASE("init without any torchrun variables falls back to a single process", "[init]") {
  auto res = run_ranks({"/usr/bin/env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "MASTER_ADDR", "-u", "MASTER_PORT",
                        helper("rt_worker"), "collectives"},
                       1);
  INFO(res.summary());
  REQUIRE_FALSE(res.timed_out);
  CHECK(res.ranks[0].exit_code == 0);
}
