// The exit codes' table (base/exit_codes.h) against README.md's "Exit status of `crun`": the same
// rows in the same order, README's cells read without their Markdown backticks.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/exit_codes.h"

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The rows of the first table under `heading`, each as its cells, backticks removed.
std::vector<std::vector<std::string>> table_under(const std::string& path, const std::string& heading) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  while (std::getline(in, line) && line != heading) {
  }
  REQUIRE(line == heading);
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.empty() && rows.empty()) continue;
    if (line.empty() || line[0] != '|') break;
    std::string text;
    for (char c : line) {
      if (c != '`') text += c;
    }
    std::vector<std::string> cells;
    std::stringstream cut(text.substr(1));
    std::string cell;
    while (std::getline(cut, cell, '|')) cells.push_back(trim(cell));
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("README.md lists the exit codes of base/exit_codes.h, row for row", "[exit_codes]") {
  const auto rows = table_under(CRUN_SOURCE_DIR "/README.md", "## Exit status of `crun`");
  REQUIRE(rows.size() >= 2);
  CHECK(rows[0] == std::vector<std::string>{"code", "in short", "details"});
  CHECK(rows[1][0].find_first_not_of("-") == std::string::npos);  // the header's rule
  const std::size_t listed = rows.size() - 2;
  CHECK(listed == std::size(crun::kExitCodes));
  for (std::size_t i = 0; i < std::min(listed, std::size(crun::kExitCodes)); ++i) {
    const auto& want = crun::kExitCodes[i];
    INFO("README.md's row " << i + 1);
    CHECK(rows[i + 2] ==
          std::vector<std::string>{std::string(want.code), std::string(want.summary), std::string(want.details)});
  }
}

TEST_CASE("each exit code has one row", "[exit_codes]") {
  std::set<std::string_view> codes;
  for (const auto& row : crun::kExitCodes) {
    CHECK(codes.insert(row.code).second);
    CHECK(row.summary.find('\n') == std::string_view::npos);
    CHECK(row.summary.size() <= 60);  // one line of --help
  }
}
