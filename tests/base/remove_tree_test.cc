// remove_tree: a directory and all it holds goes; a symbolic link inside goes as itself, never
// followed; too deep a tree is refused below the bound and said so.
#include "base/remove_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using crun::remove_tree;
using crun::test::TempDir;

TEST_CASE("remove_tree removes a tree, not what its links point to", "[remove_tree]") {
  TempDir tmp("crun-remove-tree");
  const fs::path outside = tmp.path / "outside";
  fs::create_directories(outside / "sub");
  std::ofstream(outside / "sub" / "keep") << "kept";
  const fs::path run = tmp.path / "run";
  fs::create_directories(run / "attempt_0" / "0");
  std::ofstream(run / "attempt_0" / "0" / "error.json") << "{}";
  REQUIRE(::mkfifo((run / "timer").c_str(), 0600) == 0);
  fs::create_directory_symlink(outside, run / "attempt_0" / "link");
  fs::create_directory_symlink(outside / "sub", run / "attempt_0" / "0" / "sublink");

  CHECK(remove_tree(run.c_str()));
  CHECK_FALSE(fs::exists(fs::symlink_status(run)));
  CHECK(fs::exists(outside / "sub" / "keep"));

  CHECK(remove_tree(run.c_str()));  // gone already: nothing left to remove
}

TEST_CASE("remove_tree does not follow a link given as the tree", "[remove_tree]") {
  TempDir tmp("crun-remove-tree");
  fs::create_directories(tmp.path / "real");
  std::ofstream(tmp.path / "real" / "keep") << "kept";
  fs::create_directory_symlink(tmp.path / "real", tmp.path / "link");
  const bool removed = remove_tree((tmp.path / "link").c_str());  // O_DIRECTORY | O_NOFOLLOW: refused
  const int e = errno;
  CHECK_FALSE(removed);
  CHECK((e == ENOTDIR || e == ELOOP));
  CHECK(fs::is_symlink(tmp.path / "link"));
  CHECK(fs::exists(tmp.path / "real" / "keep"));
}

TEST_CASE("remove_tree stops at kMaxTreeDepth and says so", "[remove_tree]") {
  TempDir tmp("crun-remove-tree");
  fs::path deep = tmp.path / "top";
  for (int i = 0; i <= crun::kMaxTreeDepth; ++i) deep /= "d";
  fs::create_directories(deep);
  std::ofstream(deep / "f") << "x";
  const bool removed = remove_tree((tmp.path / "top").c_str());
  const int e = errno;
  CHECK_FALSE(removed);
  CHECK(e == ELOOP);
  CHECK(fs::exists(deep));  // what lies below the bound stays

  fs::path ok = tmp.path / "ok";
  for (int i = 0; i < crun::kMaxTreeDepth; ++i) ok /= "d";
  fs::create_directories(ok);
  std::ofstream(ok / "f") << "x";
  CHECK(remove_tree((tmp.path / "ok").c_str()));
  CHECK_FALSE(fs::exists(tmp.path / "ok"));
}
