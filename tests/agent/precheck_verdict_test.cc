// The pre-flight check's verdict rule (precheck/precheck_verdict.h): pure.
#include <catch2/catch.hpp>

#include <fstream>

#include "agent/precheck_run.h"
#include "precheck/precheck_verdict.h"
#include "tests/support/temp_dir.h"

using namespace crun::precheck;

TEST_CASE("a node's time is its slowest rank's; a node above slowdown x the median is slow", "[precheck_verdict]") {
  const auto v = judge_precheck({{0, 0.30}, {0, 0.31}, {1, 0.29}, {1, 0.90}, {2, 0.30}, {2, 0.32}}, 2.0);
  REQUIRE(v.nodes.size() == 3);
  REQUIRE(v.seconds_of(1) == Approx(0.90));
  REQUIRE(v.median == Approx(0.32));
  REQUIRE(v.slow == std::vector<int>{1});
  REQUIRE(v.is_slow(1));
  REQUIRE_FALSE(v.is_slow(0));
  REQUIRE(slow_reason(v, 1) == "precheck: 2.812x the median (0.9 s vs 0.32 s)");
}

TEST_CASE("two nodes: the faster one is the reference", "[precheck_verdict]") {
  REQUIRE(judge_precheck({{0, 0.2}, {1, 0.5}}, 2.0).slow == std::vector<int>{1});
  REQUIRE(judge_precheck({{0, 0.2}, {1, 0.39}}, 2.0).slow.empty());
  REQUIRE(judge_precheck({{0, 0.31}, {1, 0.2}}, 1.5).slow == std::vector<int>{0});
}

TEST_CASE("one node is never slow; no ranks, no nodes", "[precheck_verdict]") {
  const auto v = judge_precheck({{0, 0.1}, {0, 5.0}}, 1.01);
  REQUIRE(v.slow.empty());
  REQUIRE(v.median == Approx(5.0));
  REQUIRE(judge_precheck({}, 2.0).nodes.empty());
}

TEST_CASE("every node equal: none is slow; the JSON names them all", "[precheck_verdict]") {
  const auto v = judge_precheck({{1, 0.25}, {0, 0.25}, {3, 0.25}, {2, 0.25}}, 1.5);
  REQUIRE(v.slow.empty());
  REQUIRE(verdict_json(v, 2, 0.05) ==
          "{\"node\":2,\"seconds\":0.25,\"median\":0.25,\"slowdown\":1.5,\"allreduce_seconds\":0.05,\"slow\":[],"
          "\"nodes\":[[0,0.25],[1,0.25],[2,0.25],[3,0.25]]}");
}

TEST_CASE("the agent reads the verdict crun-precheck wrote; an oversized or missing file is no verdict",
          "[precheck_verdict]") {
  crun::test::TempDir dir("precheck");
  const std::string path = (dir.path / "verdict.json").string();
  const auto v = judge_precheck({{0, 0.2}, {1, 0.9}}, 2.0);
  std::ofstream(path) << verdict_json(v, 0, 0.05) << "\n";
  const crun::PrecheckReading r = crun::read_precheck(path);
  CHECK_FALSE(r.proceed);
  CHECK_THAT(r.line, Catch::Contains("slow node rank 1; waiting for the next round"));
  // Past the bound (1 MiB) the file is not read whole: no verdict, the node proceeds.
  std::ofstream(path) << verdict_json(v, 0, 0.05) << std::string(std::size_t{2} << 20, ' ') << "\n";
  const crun::PrecheckReading big = crun::read_precheck(path);
  CHECK(big.proceed);
  CHECK(big.verdict.empty());
  CHECK(crun::read_precheck((dir.path / "absent").string()).proceed);
}
