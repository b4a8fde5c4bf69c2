// Test helpers for the agent's e2e tests: the failure_report.json crun wrote under a --log-dir,
// and one rank's captured stacks in it. For Catch2 test files (a missing report FAILs the test).
// Threading: plain functions, no state.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace crun::test {

// The failure report crun wrote under `log_dir` (its run dir is <log_dir>/<run id>_XXXXXX).
inline nlohmann::json read_report(const std::filesystem::path& log_dir) {
  for (const auto& run : std::filesystem::directory_iterator(log_dir)) {
    const auto file = run.path() / "failure_report.json";
    if (!std::filesystem::exists(file)) continue;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
  }
  FAIL("no failure_report.json under " << log_dir);
  return {};
}

// Rank `rank`'s entry in the report's "stacks", or nullptr; it points into `report`, which must outlive it.
inline const nlohmann::json* stacks_of(const nlohmann::json& report, int rank) {
  if (!report.contains("stacks")) return nullptr;
  for (const auto& s : report["stacks"]) {
    if (s["rank"] == rank) return &s;
  }
  return nullptr;
}

}  // namespace crun::test
