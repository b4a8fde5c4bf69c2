// CRUN_STATE_DIR end to end: the real crun, shell workers that save by the protocol (a dot-name,
// then a rename), fail and restart; the agent SIGKILLed; two jobs side by side.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

using namespace crun::test;
namespace fs = std::filesystem;

namespace {

// crun running `script` under /bin/sh for each worker; CRUN_STATE_ROOT is `root`.
std::vector<std::string> sh_job(const std::vector<std::string>& crun_args, const std::string& script) {
  std::vector<std::string> argv{CRUN_BIN};
  argv.insert(argv.end(), crun_args.begin(), crun_args.end());
  argv.insert(argv.end(), {"--no-python", "/bin/sh", "-c", script});
  return argv;
}

std::vector<std::string> root_env(const fs::path& root) { return {"CRUN_STATE_ROOT=" + root.string()}; }

// Every script starts so: d is the rank's directory, n the restart count; no directory, exit 9.
const std::string kPrelude = R"SH(d="$CRUN_STATE_DIR"; n=$TORCHELASTIC_RESTART_COUNT; [ -n "$d" ] && [ -d "$d" ] || exit 9
save() { printf '%s' "$2" > "$d/.$1.tmp" && mv "$d/.$1.tmp" "$d/$1"; }
)SH";

std::string field(const std::string& out, const std::string& key) {
  const std::regex re(key + "=([^ \n]*)");
  std::smatch m;
  return std::regex_search(out, m, re) ? std::string(m[1]) : std::string();
}

}  // namespace

TEST_CASE("state kept across 3 restarts: each rank reads back what it saved before failing", "[state]") {
  TempDir root;
  TempDir marks;
  // Rank 1 saves, then says so; rank 0 saves, waits for it (bounded), then fails: both saves are
  // in before the group stops.
  const std::string script = kPrelude + R"SH(echo "rank=$RANK restart=$n read=$(cat "$d/state" 2>/dev/null || echo none)"
save state "saved-by-$RANK-$n" || exit 8
[ "$n" -ge 3 ] && exit 0
if [ "$RANK" = 1 ]; then : > )SH" + marks.path.string() + R"SH(/saved-$n; exec sleep 60; fi
i=0; while [ ! -e )SH" + marks.path.string() + R"SH(/saved-$n ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
exit 1)SH";
  ChildProcess p(sh_job({"--nproc-per-node", "2", "--max-restarts", "3"}, script), root_env(root.path));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.out() << p.err());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    CHECK(count(p.out(), "rank=" + r + " restart=0 read=none") == 1);
    for (int restart = 1; restart <= 3; ++restart) {
      CHECK(count(p.out(), "rank=" + r + " restart=" + std::to_string(restart) + " read=saved-by-" + r + "-" +
                               std::to_string(restart - 1) + "\n") == 1);
    }
  }
  CHECK(fs::is_empty(root.path));  // removed at the job's end
}

TEST_CASE("state removed at the job's end, whether it succeeds or fails", "[state]") {
  TempDir root;
  ChildProcess ok(sh_job({}, kPrelude + R"SH(save ckpt data; echo "dir=$d"; exit 0)SH"), root_env(root.path));
  REQUIRE(ok.wait_exit() == 0);
  CHECK(field(ok.out(), "dir").rfind(root.path.string() + "/crun-state-", 0) == 0);
  CHECK(fs::is_empty(root.path));
  ChildProcess failed(sh_job({}, kPrelude + R"SH(save ckpt data; echo "dir=$d"; exit 3)SH"), root_env(root.path));
  REQUIRE(failed.wait_exit() == 3);
  CHECK(field(failed.out(), "dir").rfind(root.path.string() + "/crun-state-", 0) == 0);
  CHECK(fs::is_empty(root.path));
}

TEST_CASE("agent SIGKILLed: crun-keeper removes the job's state", "[state]") {
  TempDir root;
  ChildProcess p(sh_job({}, kPrelude + R"SH(save ckpt data; echo "dir=$d"; exec sleep 60)SH"), root_env(root.path));
  REQUIRE(p.wait_for_stdout("dir="));
  const fs::path dir = field(p.out(), "dir");
  REQUIRE(fs::exists(dir / "ckpt"));
  p.signal(SIGKILL);
  REQUIRE(p.wait_exit() == 128 + SIGKILL);
  CHECK(eventually([&] { return !fs::exists(dir.parent_path()); }, std::chrono::seconds(15)));
}

TEST_CASE("a torn save is not restored: a half-written dot-file, a committed file written in place", "[state]") {
  TempDir root;
  const std::string script = kPrelude + R"SH(echo "restart=$n listing=$(ls -A "$d" | tr '\n' ,) ckpt=$(cat "$d/ckpt" 2>/dev/null)"
case $n in
0) save ckpt v0; head -c 100000 /dev/zero > "$d/.ckpt.tmp"; kill -9 0 ;;
1) printf tor > "$d/ckpt"; kill -9 0 ;;
esac
exit 0)SH";
  ChildProcess p(sh_job({"--max-restarts", "2"}, script), root_env(root.path));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.out() << p.err());
  CHECK(count(p.out(), "restart=1 listing=ckpt, ckpt=v0\n") == 1);  // the dot-file gone, v0 back
  CHECK(count(p.out(), "restart=2 listing= ckpt=\n") == 1);         // written in place: dropped
  CHECK(count(p.err(), "rank 0: state file ckpt was written in place after its commit (no rename): that version is "
                       "dropped, not restored") == 1);
}

TEST_CASE("a save over --state-max-bytes is refused with one line; the previous version is back; the job goes on",
          "[state]") {
  TempDir root;
  const std::string script = kPrelude + R"SH(echo "restart=$n size=$(wc -c < "$d/ckpt" 2>/dev/null)"
case $n in
0) save ckpt 0123456789; exit 1 ;;
1) save ckpt "$(head -c 2000 /dev/zero | tr '\0' x)"; exit 1 ;;
esac
exit 0)SH";
  ChildProcess p(sh_job({"--max-restarts", "2", "--state-max-bytes", "1KiB"}, script), root_env(root.path));
  REQUIRE(p.wait_exit() == 0);
  INFO(p.out() << p.err());
  CHECK(count(p.out(), "restart=1 size=10\n") == 1);
  CHECK(count(p.out(), "restart=2 size=10\n") == 1);
  CHECK(count(p.err(), "refused") == 1);
  CHECK(count(p.err(), "rank 0: state file ckpt (2000 bytes) refused: the rank's committed state would be 2000 bytes, "
                       "over --state-max-bytes 1 KiB; the previous version is back\n") == 1);
}

TEST_CASE("two jobs on one host, same run id: apart, 0700, neither sees the other's state", "[state]") {
  TempDir root;
  TempDir marks;
  const auto job = [&](const std::string& me, const std::string& other) {
    return sh_job({"--rdzv-id", "same"}, kPrelude + "save mine " + me + "; : > " + marks.path.string() + "/" + me +
                                              R"SH(
i=0; while [ ! -e )SH" + marks.path.string() + "/" + other + R"SH( ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
echo "dir=$d mode=$(stat -c %a "$(dirname "$d")") listing=$(ls -A "$d" | tr '\n' ,) mine=$(cat "$d/mine")")SH");
  };
  ChildProcess a(job("a", "b"), root_env(root.path));
  ChildProcess b(job("b", "a"), root_env(root.path));
  REQUIRE(a.wait_exit() == 0);
  REQUIRE(b.wait_exit() == 0);
  INFO(a.out() << b.out());
  CHECK(field(a.out(), "dir") != field(b.out(), "dir"));
  CHECK(field(a.out(), "dir").find("/crun-state-same-") != std::string::npos);
  CHECK(field(a.out(), "mode") == "700");
  CHECK(field(b.out(), "mode") == "700");
  CHECK(field(a.out(), "listing") == "mine,");
  CHECK(field(b.out(), "listing") == "mine,");
  CHECK(field(a.out(), "mine") == "a");
  CHECK(field(b.out(), "mine") == "b");
}

TEST_CASE("a bad --state-max-bytes or PET_STATE_MAX_BYTES: one line, exit 2, nothing started", "[state]") {
  for (const char* bad : {"0", "lots", "-1", "3XB"}) {
    ChildProcess p(sh_job({"--state-max-bytes", bad}, "echo started"));
    CHECK(p.wait_exit() == 2);
    CHECK(p.err() == std::string("crun: error: --state-max-bytes: expected a size > 0 such as 256MiB, 1GiB or a number of "
                                 "bytes, got '") + bad + "'\n");
    CHECK(p.out().empty());
  }
  ChildProcess p(sh_job({}, "echo started"), {"PET_STATE_MAX_BYTES=1.5G"});
  CHECK(p.wait_exit() == 2);
  CHECK(count(p.err(), "PET_STATE_MAX_BYTES: expected a size > 0") == 1);
  CHECK(p.out().empty());
}
