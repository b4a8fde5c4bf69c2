// The CRUN_CONTROL_FILE parser (agent/control_file.h): requests, bounds, bad lines; and the reader
// on real files (a FIFO, a link, a missing file).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "agent/control_file.h"
#include "base/control_requests.h"
#include "base/exit_codes.h"
#include "rendezvous/rendezvous_records.h"
#include "tests/support/temp_dir.h"

using namespace crun;
using Kind = WorkerRequest::Kind;

namespace {
ControlFileReading parse(std::string_view text) { return parse_control_file(text, text.size()); }
}  // namespace

TEST_CASE("control file: the two verbs, their reasons, the file's order", "[control_file]") {
  const auto r = parse("stop-job data corrupt\nexclude-node  GPU 3 has XID 79 \n");
  REQUIRE(r.requests.size() == 2);
  CHECK(r.requests[0] == WorkerRequest{Kind::kStopJob, "data corrupt"});
  CHECK(r.requests[1] == WorkerRequest{Kind::kExcludeNode, "GPU 3 has XID 79"});
  CHECK(r.ignored.empty());
  REQUIRE(r.governing);
  CHECK(r.governing->kind == Kind::kStopJob);
  CHECK(request_text(*r.governing) == "stop-job data corrupt");
}

TEST_CASE("control file: a stop-job outranks an earlier exclude-node; else the first request counts", "[control_file]") {
  auto r = parse("exclude-node first\nexclude-node second\nstop-job third\nstop-job fourth");
  REQUIRE(r.governing);
  CHECK(*r.governing == WorkerRequest{Kind::kStopJob, "third"});
  r = parse("exclude-node first\nexclude-node second\n");
  CHECK(*r.governing == WorkerRequest{Kind::kExcludeNode, "first"});
  CHECK_FALSE(parse("").governing);
  CHECK_FALSE(parse("\n\n   \n").governing);
}

TEST_CASE("control file: no reason, CRLF, tabs, a last line without its newline", "[control_file]") {
  const auto r = parse("stop-job\r\nexclude-node\tbad disk\r\n\n  stop-job   spaced  ");
  REQUIRE(r.requests.size() == 3);
  CHECK(r.requests[0] == WorkerRequest{Kind::kStopJob, ""});
  CHECK(request_text(r.requests[0]) == "stop-job");
  CHECK(r.requests[1] == WorkerRequest{Kind::kExcludeNode, "bad disk"});
  CHECK(r.requests[2] == WorkerRequest{Kind::kStopJob, "spaced"});
  CHECK(r.ignored.empty());
}

TEST_CASE("control file: an unknown verb is one entry naming it, and ignored", "[control_file]") {
  auto r = parse("stop-jobs now\nSTOP-JOB now\nexclude-node ok\n");
  REQUIRE(r.requests.size() == 1);
  CHECK(r.requests[0].kind == Kind::kExcludeNode);
  REQUIRE(r.ignored.size() == 2);
  CHECK(r.ignored[0] == "line 1: unknown request 'stop-jobs' (known: exclude-node, stop-job)");
  CHECK(r.ignored[1].find("line 2: unknown request 'STOP-JOB'") == 0);
  // A verb shown is printable and cut.
  r = parse(std::string(200, 'v') + "\x1b[31m x\n");
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0] == "line 1: unknown request '" + std::string(kShownVerbBytes, 'v') + "...' (known: exclude-node, stop-job)");
}

TEST_CASE("control file: a line over the bound is one entry, and ignored; one at the bound counts", "[control_file]") {
  const std::string at_bound = "stop-job " + std::string(kControlLineMaxBytes - 9, 'r');
  REQUIRE(at_bound.size() == kControlLineMaxBytes);
  auto r = parse(at_bound + "\n");
  REQUIRE(r.requests.size() == 1);
  CHECK(r.requests[0].reason.size() == kControlLineMaxBytes - 9);
  r = parse(at_bound + "r\nexclude-node short\n");
  REQUIRE(r.requests.size() == 1);
  CHECK(r.requests[0] == WorkerRequest{Kind::kExcludeNode, "short"});
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0] == "line 1: 1025 bytes, over the 1024-byte limit of a line");
}

TEST_CASE("control file: past the file's bound, the rest and the line cut there are ignored, in one entry",
          "[control_file]") {
  std::string text;
  while (text.size() + 20 < kControlFileMaxBytes) text += "exclude-node filler\n";
  text += "stop-job cut at the bound, never whole";
  const std::uint64_t size = text.size() + 1000;
  const auto r = parse_control_file(text.substr(0, kControlFileMaxBytes), size);
  CHECK_FALSE(r.governing->kind == Kind::kStopJob);
  CHECK(r.requests.size() == kShownRequests);
  CHECK(r.more_requests > 3000);
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0] == "the file holds " + std::to_string(size) + " bytes: what lies past its first 65536 is ignored");
}

TEST_CASE("control file: many bad lines keep a bounded number of entries and count the rest", "[control_file]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "junk\n";
  const auto r = parse(text);
  CHECK(r.ignored.size() == kShownIgnored);
  CHECK(r.more_ignored == 100 - kShownIgnored);
  CHECK_FALSE(r.governing);
}

TEST_CASE("control file: reasons are printable: control bytes and invalid UTF-8 become '?'", "[control_file]") {
  CHECK(printable("plain ascii") == "plain ascii");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable("\x1b[2J\x07\x7f") == "?[2J??");
  CHECK(printable("\xff\xc3") == "??");                // not UTF-8, a cut sequence
  CHECK(printable("\xc0\xaf") == "??");                // overlong
  CHECK(printable("\xed\xa0\x80") == "???");           // a surrogate
  CHECK(printable("\xc2\x9b") == "??");                // C1 control (CSI)
  CHECK(printable("\xf4\x90\x80\x80") == "????");      // past U+10FFFF
  const auto r = parse(std::string("stop-job bad\x01" "byte\xfe\n"));
  CHECK(r.governing->reason == "bad?byte?");
}

TEST_CASE("control file: read from disk; a FIFO, a link, a missing file", "[control_file]") {
  crun::test::TempDir dir;
  const std::string file = (dir.path / "control").string();
  CHECK_FALSE(read_control_file(file).governing);  // missing: no request
  CHECK(read_control_file(file).ignored.empty());
  {
    std::ofstream(file) << "stop-job from disk\n";
  }
  auto r = read_control_file(file);
  REQUIRE(r.governing);
  CHECK(r.governing->reason == "from disk");
  {
    std::ofstream f(file, std::ios::trunc);
    f << std::string(kControlFileMaxBytes + 10, 'x');
  }
  r = read_control_file(file);
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0].find("what lies past its first 65536 is ignored") != std::string::npos);

  const std::string fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = read_control_file(fifo);  // must not block
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0] == fifo + " is not a regular file: not read");

  const std::string link = (dir.path / "link").string();
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  r = read_control_file(link);
  REQUIRE(r.ignored.size() == 1);
  CHECK(r.ignored[0] == "cannot open " + link + ": it is a symbolic link");
}

TEST_CASE("control file: what a coordinated node publishes with its failure", "[control_file]") {
  RoundOutcome o;
  add_to_outcome(o, {Kind::kStopJob, "data corrupt"}, 3);
  CHECK(o.exit_code == 3);
  CHECK(o.stop_request == "data corrupt");
  CHECK(o.exclude_request.empty());
  const auto back = RoundOutcome::from_json(o.to_json());
  CHECK(back.stop_request == "data corrupt");
  RoundOutcome x;
  add_to_outcome(x, {Kind::kExcludeNode, ""}, 0);
  CHECK(x.exit_code == kExitNodeUnhealthy);  // never a failure published as 0
  CHECK(x.exclude_request == "no reason given");
  RoundOutcome s;
  add_to_outcome(s, {Kind::kStopJob, "converged"}, 0);
  CHECK(s.exit_code == 0);  // an early stop: the coordinator closes the job with 0
}
