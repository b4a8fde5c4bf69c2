// agent/state_ledger: the commit rules of CRUN_STATE_DIR, without files.
#include "agent/state_ledger.h"

#include <catch2/catch.hpp>

using namespace crun;

TEST_CASE("state names: a dot-name is a save being written, never committed", "[state_ledger]") {
  CHECK(is_state_name("ckpt.pt"));
  CHECK(is_state_name("checkpoint-000000000010.crun"));
  CHECK_FALSE(is_state_name(""));
  CHECK_FALSE(is_state_name(".ckpt.pt.tmp"));
  CHECK_FALSE(is_state_name("."));
  CHECK_FALSE(is_state_name("a/b"));
}

TEST_CASE("commits: counted per rank, the same file twice is one, a new version replaces the old", "[state_ledger]") {
  StateLedger l;
  CHECK(l.sequence(3) == 0);
  CHECK(l.commit(3, "a", {1, 10, 100}, 1000).verdict == StateLedger::Verdict::kAccepted);
  CHECK(l.commit(3, "a", {1, 10, 100}, 1000).verdict == StateLedger::Verdict::kSame);
  CHECK(l.sequence(3) == 1);
  CHECK(l.commit(3, "b", {1, 11, 300}, 1000).verdict == StateLedger::Verdict::kAccepted);
  CHECK(l.bytes(3) == 400);
  CHECK(l.commit(3, "a", {1, 12, 700}, 1000).verdict == StateLedger::Verdict::kAccepted);  // 300 + 700: at the bound
  CHECK(l.bytes(3) == 1000);
  CHECK(l.committed(3).at("a").facts.inode == 12);
  CHECK(l.committed(3).at("a").sequence == 3);
  CHECK(l.sequence(4) == 0);
  CHECK(l.bytes(4) == 0);
}

TEST_CASE("over the bound: refused, nothing changes", "[state_ledger]") {
  StateLedger l;
  REQUIRE(l.commit(0, "a", {1, 10, 600}, 1000).verdict == StateLedger::Verdict::kAccepted);
  const auto refused = l.commit(0, "b", {1, 11, 401}, 1000);
  CHECK(refused.verdict == StateLedger::Verdict::kRefuse);
  CHECK(refused.needed == 1001);
  CHECK(l.commit(0, "a", {1, 12, 1001}, 1000).verdict == StateLedger::Verdict::kRefuse);
  CHECK(l.committed(0).size() == 1);
  CHECK(l.committed(0).at("a").facts.inode == 10);
  CHECK(l.bytes(0) == 600);
  CHECK(l.sequence(0) == 1);
}

TEST_CASE("a name gone leaves the set unless it still holds the committed file", "[state_ledger]") {
  StateLedger l;
  REQUIRE(l.commit(0, "a", {1, 10, 5}, 100).verdict == StateLedger::Verdict::kAccepted);
  CHECK_FALSE(l.gone(0, "a", StateFileFacts{1, 10, 5}));  // put back already
  CHECK_FALSE(l.gone(0, "never", std::nullopt));
  CHECK(l.gone(0, "a", StateFileFacts{1, 99, 5}));
  CHECK(l.committed(0).empty());
  CHECK(l.bytes(0) == 0);
  CHECK(l.sequence(0) == 2);
}

TEST_CASE("a committed file written in place is dropped; another inode's writes are not its", "[state_ledger]") {
  StateLedger l;
  REQUIRE(l.commit(0, "a", {1, 10, 5}, 100).verdict == StateLedger::Verdict::kAccepted);
  CHECK_FALSE(l.modified(0, "a", 11));
  CHECK(l.modified(0, "a", 10));
  CHECK(l.committed(0).empty());
  CHECK(l.sequence(0) == 2);
}

TEST_CASE("replace: a set installed from elsewhere, with its sequence", "[state_ledger]") {
  StateLedger l;
  REQUIRE(l.commit(1, "old", {1, 10, 5}, 100).verdict == StateLedger::Verdict::kAccepted);
  l.replace(1, {{"x", {{1, 20, 7}, 9}}, {"y", {{1, 21, 8}, 9}}}, 9);
  CHECK(l.committed(1).size() == 2);
  CHECK(l.bytes(1) == 15);
  CHECK(l.sequence(1) == 9);
}
