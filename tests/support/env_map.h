// env_map: a worker's environment ("KEY=VALUE" entries) as a map, for tests that look up its
// variables; a key given twice fails the test. Threading: the test's thread.
#pragma once

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

namespace crun::test {

inline std::map<std::string, std::string> env_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    const auto eq = kv.find('=');
    REQUIRE(m.count(kv.substr(0, eq)) == 0);  // no key twice
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

}  // namespace crun::test
