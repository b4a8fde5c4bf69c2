// StandaloneRendezvous through the Rendezvous interface, with a fake event loop (a queue).
#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "rendezvous/standalone_rendezvous.h"

using namespace crun;

namespace {

struct FakeLoop {
  std::vector<std::function<void()>> queued;
  PostToLoop post() {
    return [this](std::function<void()> f) { queued.push_back(std::move(f)); };
  }
  void run() {
    auto now = std::move(queued);
    queued.clear();
    for (auto& f : now) f();
  }
};

}  // namespace

TEST_CASE("standalone: each round is posted, one node, and every round after the first a restart", "[standalone]") {
  FakeLoop loop;
  std::vector<RoundResult> rounds;
  RendezvousListener l;
  l.on_round = [&](const RoundResult& r) { rounds.push_back(r); };
  std::unique_ptr<Rendezvous> rdzv = std::make_unique<StandaloneRendezvous>(4, "127.0.0.1", 29555, loop.post(), l);
  rdzv->request_round();
  CHECK(rounds.empty());  // never answered from inside request_round()
  loop.run();
  REQUIRE(rounds.size() == 1);
  CHECK(rounds[0].error.empty());
  CHECK(rounds[0].rendezvous_round == 0);
  CHECK(rounds[0].info.restart_count == 0);
  CHECK(rounds[0].info.group_rank == 0);
  CHECK(rounds[0].info.group_world_size == 1);
  CHECK(rounds[0].info.rank_offset == 0);
  CHECK(rounds[0].info.world_size == 4);
  CHECK(rounds[0].info.master_addr == "127.0.0.1");
  CHECK(rounds[0].info.master_port == 29555);
  rdzv->publish_failure(0, RoundOutcome{});  // nobody listens
  rdzv->request_round();
  loop.run();
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[1].info.restart_count == 1);
  CHECK(rdzv->node_id().empty());
  CHECK(rdzv->node_address().empty());
}

TEST_CASE("standalone: a free MASTER_PORT per round unless one is fixed; nothing after shutdown", "[standalone]") {
  FakeLoop loop;
  std::vector<RoundResult> rounds;
  RendezvousListener l;
  l.on_round = [&](const RoundResult& r) { rounds.push_back(r); };
  StandaloneRendezvous rdzv(1, "127.0.0.1", std::nullopt, loop.post(), l);
  rdzv.request_round();
  loop.run();
  REQUIRE(rounds.size() == 1);
  CHECK(rounds[0].info.master_port != 0);
  rdzv.request_round();
  rdzv.shutdown(std::chrono::milliseconds(0));
  loop.run();
  CHECK(rounds.size() == 1);  // the answer still queued was dropped
}
