// agent/worker_env: the worker environment, torchrun's contract.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "agent/worker_env.h"
#include "tests/support/env_map.h"

using namespace crun;

TEST_CASE("worker environment: torchrun's contract", "[worker_env]") {
  RoundInfo round;
  round.world_size = 4;
  round.master_addr = "127.0.0.1";
  round.master_port = 4242;
  round.restart_count = 1;
  WorkerIdentity who;
  who.local_rank = 3;
  who.local_world_size = 4;
  who.max_restarts = 5;
  who.role = "trainer";
  who.run_id = "job";
  who.error_file = "/tmp/e.json";
  auto env = crun::test::env_map(worker_environment({"PATH=/bin", "RANK=99", "OMP_NUM_THREADS=8"}, round, who));
  REQUIRE(env["PATH"] == "/bin");
  REQUIRE(env["RANK"] == "3");
  REQUIRE(env["LOCAL_RANK"] == "3");
  REQUIRE(env["GROUP_RANK"] == "0");
  REQUIRE(env["GROUP_WORLD_SIZE"] == "1");
  REQUIRE(env["ROLE_NAME"] == "trainer");
  REQUIRE(env["ROLE_RANK"] == "3");
  REQUIRE(env["ROLE_WORLD_SIZE"] == "4");
  REQUIRE(env["LOCAL_WORLD_SIZE"] == "4");
  REQUIRE(env["WORLD_SIZE"] == "4");
  REQUIRE(env["MASTER_ADDR"] == "127.0.0.1");
  REQUIRE(env["MASTER_PORT"] == "4242");
  REQUIRE(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  REQUIRE(env["TORCHELASTIC_MAX_RESTARTS"] == "5");
  REQUIRE(env["TORCHELASTIC_RUN_ID"] == "job");
  REQUIRE(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
  round.agent_store = true;  // MASTER_ADDR:MASTER_PORT is the agents' store
  CHECK(crun::test::env_map(worker_environment({}, round, who))["TORCHELASTIC_USE_AGENT_STORE"] == "True");
  REQUIRE(env["TORCHELASTIC_ERROR_FILE"] == "/tmp/e.json");
  REQUIRE(env["OMP_NUM_THREADS"] == "8");  // kept: the user set it
  REQUIRE(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  REQUIRE(env["NCCL_ASYNC_ERROR_HANDLING"] == "1");  // torch 1.13's name, as its torchrun sets
}

TEST_CASE("worker environment: OMP_NUM_THREADS and NCCL error handling as torchrun sets them", "[worker_env]") {
  RoundInfo round;
  round.world_size = 2;
  WorkerIdentity who;
  SECTION("several workers per node: OMP_NUM_THREADS=1") {
    who.local_world_size = 2;
    auto env = crun::test::env_map(worker_environment({"PATH=/bin"}, round, who));
    REQUIRE(env["OMP_NUM_THREADS"] == "1");
  }
  SECTION("one worker per node: OMP_NUM_THREADS stays unset (torch uses every core)") {
    who.local_world_size = 1;
    auto env = crun::test::env_map(worker_environment({"PATH=/bin"}, round, who));
    REQUIRE(env.count("OMP_NUM_THREADS") == 0);
  }
  SECTION("the user's NCCL settings are kept, under either name") {
    who.local_world_size = 2;
    auto env = crun::test::env_map(worker_environment({"NCCL_ASYNC_ERROR_HANDLING=0", "TORCH_NCCL_ASYNC_ERROR_HANDLING=2"}, round, who));
    REQUIRE(env["NCCL_ASYNC_ERROR_HANDLING"] == "0");
    REQUIRE(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2");
  }
}

TEST_CASE("worker environment: the watchdogs' files only when the agent serves them", "[worker_env]") {
  RoundInfo round;
  WorkerIdentity who;
  auto off = crun::test::env_map(worker_environment({"PATH=/bin", "TORCHELASTIC_TIMER_FILE=/user/set"}, round, who));
  CHECK(off.count("CRUN_HEARTBEAT_FILE") == 0);
  CHECK(off["TORCHELASTIC_TIMER_FILE"] == "/user/set");  // torch's agent passes the variable on as well
  who.timer_file = "/run/crun/file_timer";
  who.heartbeat_file = "/run/crun/attempt_0/0/heartbeat";
  auto on = crun::test::env_map(worker_environment({"PATH=/bin", "TORCHELASTIC_TIMER_FILE=/user/set"}, round, who));
  CHECK(on["TORCHELASTIC_TIMER_FILE"] == "/run/crun/file_timer");
  CHECK(on["CRUN_HEARTBEAT_FILE"] == "/run/crun/attempt_0/0/heartbeat");
}

TEST_CASE("worker environment: CRUN_STATE_DIR when the agent gives the rank one", "[worker_env]") {
  RoundInfo round;
  WorkerIdentity who;
  CHECK(crun::test::env_map(worker_environment({"PATH=/bin"}, round, who)).count("CRUN_STATE_DIR") == 0);
  who.state_dir = "/dev/shm/crun-state-r1-42/rank-3";
  CHECK(crun::test::env_map(worker_environment({"CRUN_STATE_DIR=/user/set"}, round, who))["CRUN_STATE_DIR"] ==
        "/dev/shm/crun-state-r1-42/rank-3");
}

TEST_CASE("worker environment: --virtual-local-rank gives LOCAL_RANK 0 and the worker's own device", "[worker_env]") {
  RoundInfo round;
  round.world_size = 2;
  WorkerIdentity who;
  who.local_rank = 1;
  who.local_world_size = 2;
  auto env = crun::test::env_map(worker_environment({"CUDA_VISIBLE_DEVICES=4,6"}, round, who));
  REQUIRE(env["LOCAL_RANK"] == "1");
  REQUIRE(env["CUDA_VISIBLE_DEVICES"] == "4,6");
  who.visible_device = "6";
  env = crun::test::env_map(worker_environment({"CUDA_VISIBLE_DEVICES=4,6"}, round, who));
  REQUIRE(env["LOCAL_RANK"] == "0");
  REQUIRE(env["RANK"] == "1");
  REQUIRE(env["CUDA_VISIBLE_DEVICES"] == "6");
}

TEST_CASE("worker environment: one spelling of an NCCL switch is copied to the other; CRUN_PG_TIMEOUT_SEC", "[worker_env]") {
  RoundInfo round;
  WorkerIdentity who;
  SECTION("torch 1.x's name given: torch 2.x's gets the same value") {
    auto env = crun::test::env_map(worker_environment({"NCCL_ASYNC_ERROR_HANDLING=0", "NCCL_BLOCKING_WAIT=1"}, round, who));
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0");
    CHECK(env["TORCH_NCCL_BLOCKING_WAIT"] == "1");
  }
  SECTION("torch 2.x's name given: torch 1.x's gets the same value") {
    auto env = crun::test::env_map(worker_environment({"TORCH_NCCL_ASYNC_ERROR_HANDLING=3", "TORCH_NCCL_BLOCKING_WAIT=0"}, round, who));
    CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "3");
    CHECK(env["NCCL_BLOCKING_WAIT"] == "0");
  }
  SECTION("blocking wait stays unset when the user sets neither") {
    auto env = crun::test::env_map(worker_environment({"PATH=/bin"}, round, who));
    CHECK(env.count("NCCL_BLOCKING_WAIT") == 0);
    CHECK(env.count("TORCH_NCCL_BLOCKING_WAIT") == 0);
    CHECK(env.count("CRUN_PG_TIMEOUT_SEC") == 0);
  }
  SECTION("--pg-timeout reaches the workers; the user's own variable is kept") {
    who.pg_timeout_sec = "120";
    CHECK(crun::test::env_map(worker_environment({"PATH=/bin"}, round, who))["CRUN_PG_TIMEOUT_SEC"] == "120");
    CHECK(crun::test::env_map(worker_environment({"CRUN_PG_TIMEOUT_SEC=120.0"}, round, who))["CRUN_PG_TIMEOUT_SEC"] == "120.0");
  }
}
