// TempDir: a directory of the test's own, /tmp/<prefix>-XXXXXX, made by the constructor (it throws
// std::system_error when it cannot) and removed with all it holds by the destructor.
// Threading: the owning thread.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace crun::test {

struct TempDir {
  explicit TempDir(const std::string& prefix = "crun-test") {
    std::string templ = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
    path = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

}  // namespace crun::test
