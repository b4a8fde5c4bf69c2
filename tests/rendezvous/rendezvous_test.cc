// The c10d-style rendezvous: a real store and coordinator on loopback, each agent's participant
// on a loop of its own.
#include <dirent.h>

#include <catch2/catch.hpp>
#include <future>
#include <map>
#include <set>

#include "rendezvous/rendezvous_coordinator.h"
#include "rendezvous/rendezvous_participant.h"
#include "store/store_connection.h"
#include "tests/support/hand_store_server.h"
#include "tests/support/loop_thread.h"
#include "tests/support/loopback_socket.h"
#include "tests/support/store_fixture.h"

using namespace crun;
using namespace crun::test;

namespace {

RendezvousConfig config(int min_nodes, int max_nodes, int max_restarts = 0) {
  RendezvousConfig c;
  c.run_id = "job42";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.max_restarts = max_restarts;
  c.join_timeout = 10s;
  c.last_call_timeout = 300ms;
  c.heartbeat_timeout = 2s;
  c.keep_alive_interval = 100ms;
  return c;
}

struct Job {
  explicit Job(RendezvousConfig c)
      : cfg(c),
        coordinator(fixture.endpoint(), {}, c, [this](const std::string& line) { log.push(line); }, std::nullopt, {},
                    [this](const std::string& line) { progress.push(line); }) {}
  ServerFixture fixture;
  RendezvousConfig cfg;
  EventQueue<std::string> log;
  EventQueue<std::string> progress;  // what the hosting agent prints while a round forms
  RendezvousCoordinator coordinator;
};

// A participant as the agent has it, on an event loop (here a thread of the test's): made, called
// and destroyed there; its events arrive there.
class LoopParticipant {
 public:
  LoopParticipant(const StoreEndpoint& store, const StoreClientOptions& options, const RendezvousConfig& cfg,
                  const NodeRecord& self, const ParticipantEvents& events) {
    loop_.run([&] { p_ = std::make_unique<RendezvousParticipant>(loop_.io(), nullptr, store, options, cfg, self, events); });
  }
  ~LoopParticipant() {
    loop_.run([&] { p_.reset(); });
  }
  void join(std::function<std::uint16_t(const std::string&)> free_port, std::function<void(JoinResult)> done) {
    loop_.run([&] { p_->join(std::move(free_port), std::move(done)); });
  }
  void report(int round, const RoundOutcome& outcome) {
    loop_.run([&] { p_->report(round, outcome); });
  }
  void publish_status(const std::string& status, bool gather) {
    loop_.run([&] { p_->publish_status(status, gather); });
  }
  std::vector<std::string> job_status() {
    return loop_.run([&] { return p_->job_status(); });
  }
  void publish_stacks(int round, int node_rank, const std::string& record, std::function<void(bool)> done) {
    loop_.run([&] { p_->publish_stacks(round, node_rank, record, std::move(done)); });
  }
  void await_stacks(int round, int node_rank, std::chrono::milliseconds wait, std::function<void(std::optional<std::string>)> done) {
    loop_.run([&] { p_->await_stacks(round, node_rank, wait, std::move(done)); });
  }
  const std::string& node_id() const { return p_->node_id(); }  // fixed at construction
  const RendezvousKeys& keys() const { return p_->keys(); }

 private:
  LoopThread loop_;
  std::unique_ptr<RendezvousParticipant> p_;
};

// A join as the agent makes it, waited for by the caller: the answer, or what the join failed
// with (thrown by get()).
std::future<RoundAnswer> start_join(LoopParticipant& p, std::uint16_t port) {
  auto promise = std::make_shared<std::promise<RoundAnswer>>();
  auto answer = promise->get_future();
  p.join([port](const std::string&) { return port; }, [promise](JoinResult r) {
    if (r.answer) {
      promise->set_value(*r.answer);
    } else {
      promise->set_exception(r.error);
    }
  });
  return answer;
}

RoundAnswer join_now(LoopParticipant& p, std::uint16_t port) {
  auto answer = start_join(p, port);
  REQUIRE(answer.wait_for(20s) == std::future_status::ready);
  return answer.get();
}

struct Node {
  Node(Job& job, const std::string& name, int hint = -1, int nproc = 2) {
    NodeRecord r;
    r.node_id = make_node_id(name);
    r.hostname = name;
    r.addr = "10.9.0." + std::to_string(name.back() - '0');
    r.rank_hint = hint;
    r.nproc = nproc;
    r.max_restarts = job.cfg.max_restarts;
    r.min_nodes = job.cfg.min_nodes;
    r.max_nodes = job.cfg.max_nodes;
    r.program = "train";
    ParticipantEvents ev;
    ev.on_control = [this, &job](const ControlEvent& e) {
      if (e.kind == ControlEvent::Kind::kClosed) coordinator_closed_at_close.push(job.coordinator.closed());
      control.push(e);
    };
    ev.on_store_lost = [this](const std::string& w) { lost.push(w); };
    participant = std::make_unique<LoopParticipant>(job.fixture.endpoint(), StoreClientOptions{}, job.cfg, r, ev);
  }
  std::future<RoundAnswer> join_async(std::uint16_t port = 29500) {
    return start_join(*participant, port);
  }
  // The queues outlive the participant, whose loop pushes into them until it is destroyed.
  EventQueue<ControlEvent> control;
  EventQueue<bool> coordinator_closed_at_close;  // what closed() said while the close event was handled
  EventQueue<std::string> lost;
  std::unique_ptr<LoopParticipant> participant;
};

RoundAnswer get(std::future<RoundAnswer>& f) {
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  return f.get();
}

RoundOutcome failure(int code, const std::string& report) {
  RoundOutcome o;
  o.exit_code = code;
  o.report = report;
  return o;
}
RoundOutcome success() {
  RoundOutcome o;
  o.succeeded = true;
  return o;
}

}  // namespace

TEST_CASE("a fixed-size round forms once every node joined, with distinct ranks", "[rendezvous]") {
  Job job(config(3, 3));
  Node a(job, "a1"), b(job, "b2"), c(job, "c3");
  auto fa = a.join_async(1001), fb = b.join_async(1002), fc = c.join_async(1003);
  RoundAnswer ra = get(fa), rb = get(fb), rc = get(fc);
  for (auto* r : {&ra, &rb, &rc}) {
    CHECK(r->error.empty());
    CHECK(r->round == 0);
    CHECK(r->nnodes == 3);
    CHECK(r->restart_count == 0);
  }
  std::set<int> ranks{ra.node_rank, rb.node_rank, rc.node_rank};
  CHECK(ranks == std::set<int>{0, 1, 2});
  // MASTER_ADDR/PORT are rank 0's address and free port, the same for everyone.
  RoundAnswer* zero = ra.node_rank == 0 ? &ra : rb.node_rank == 0 ? &rb : &rc;
  std::map<std::string, std::uint16_t> port_of{{"10.9.0.1", 1001}, {"10.9.0.2", 1002}, {"10.9.0.3", 1003}};
  CHECK(port_of.at(zero->master_addr) == zero->master_port);
  CHECK(ra.master_addr == rb.master_addr);
  CHECK(rb.master_port == rc.master_port);
}

TEST_CASE("rank hints order the nodes", "[rendezvous]") {
  Job job(config(3, 3));
  Node a(job, "a1", 2), b(job, "b2", 0), c(job, "c3", 1);
  auto fa = a.join_async(), fb = b.join_async(), fc = c.join_async();
  CHECK(get(fa).node_rank == 2);
  CHECK(get(fb).node_rank == 0);
  CHECK(get(fc).node_rank == 1);
}

TEST_CASE("between min and max nodes a round waits for the last call", "[rendezvous]") {
  auto cfg = config(2, 3);
  cfg.last_call_timeout = 1500ms;  // longer than the 1 s progress throttle, so the line is due in time
  Job job(cfg);
  Node a(job, "a1"), b(job, "b2");
  auto t0 = std::chrono::steady_clock::now();
  auto fa = a.join_async(), fb = b.join_async();
  RoundAnswer ra = get(fa);
  get(fb);
  CHECK(std::chrono::steady_clock::now() - t0 >= 1500ms);
  CHECK(ra.nnodes == 2);
  // Progress lines told the host where the round stood.
  bool saw_last_call = false;
  std::string seen;
  while (auto p = job.progress.pop(100ms)) {
    seen += *p + "\n";
    saw_last_call |= p->find("2/2..3 nodes, last call in") != std::string::npos;
  }
  INFO(seen);
  CHECK(saw_last_call);
}

TEST_CASE("max nodes close the round at once", "[rendezvous]") {
  auto cfg = config(1, 2);
  cfg.last_call_timeout = 60s;  // would fail the bound below if it were waited out
  Job job(cfg);
  Node a(job, "a1"), b(job, "b2");
  auto fa = a.join_async(), fb = b.join_async();
  CHECK(get(fa).nnodes == 2);
  CHECK(get(fb).nnodes == 2);
}

TEST_CASE("a node with a different configuration is rejected with both names", "[rendezvous]") {
  Job job(config(2, 2));
  Node a(job, "a1", -1, 2);
  auto fa = a.join_async();
  // The first node to join sets the reference configuration: z9 joins only once a1 is counted,
  // else z9 would be the reference and a1 the one rejected.
  bool a_counted = false;
  while (!a_counted) {
    auto p = job.progress.pop(10s);
    REQUIRE(p);
    a_counted = p->find("1/2 nodes") != std::string::npos;
  }
  Node odd(job, "z9", -1, 4);
  auto fz = odd.join_async();
  RoundAnswer rz = get(fz);
  CHECK_THAT(rz.error, Catch::Contains("z9") && Catch::Contains("a1") && Catch::Contains("nproc 4 vs 2"));
  Node b(job, "b2", -1, 2);
  auto fb = b.join_async();
  CHECK(get(fa).error.empty());
  CHECK(get(fb).nnodes == 2);
}

TEST_CASE("failures restart all nodes, then close the job when restarts run out", "[rendezvous]") {
  Job job(config(2, 2, /*max_restarts=*/1));
  Node a(job, "a1", 0), b(job, "b2", 1);
  auto fa = a.join_async(), fb = b.join_async();
  RoundAnswer ra = get(fa), rb = get(fb);
  REQUIRE(ra.round == 0);
  b.participant->report(rb.round, failure(3, "rank 3 exited with 3"));
  for (Node* n : {&a, &b}) {
    auto ev = n->control.pop();
    REQUIRE(ev);
    CHECK(ev->kind == ControlEvent::Kind::kStop);
    CHECK(ev->round == 0);
    CHECK(ev->failure);
    CHECK(ev->restart_count == 1);
    CHECK(ev->report == "rank 3 exited with 3");
    CHECK_THAT(ev->detail, Catch::Contains("b2"));
  }
  fa = a.join_async();
  fb = b.join_async();
  ra = get(fa);
  rb = get(fb);
  CHECK(ra.round == 1);
  CHECK(ra.restart_count == 1);
  CHECK(ra.node_rank == 0);  // ranks are stable across rounds
  CHECK(rb.node_rank == 1);
  a.participant->report(ra.round, failure(137, "rank 0 killed by SIGKILL"));
  for (Node* n : {&a, &b}) {
    auto ev = n->control.pop();
    REQUIRE(ev);
    CHECK(ev->kind == ControlEvent::Kind::kClosed);
    CHECK(ev->exit_code == 137);
    CHECK_THAT(ev->detail, Catch::Contains("no restarts left"));
  }
  // A node arriving after the close is told so.
  Node late(job, "c3", 2);
  auto fl = late.join_async();
  RoundAnswer rl = get(fl);
  CHECK(rl.closed);
  CHECK_THAT(rl.error, Catch::Contains("closed"));
}

TEST_CASE("success on every node closes the job and drains", "[rendezvous]") {
  Job job(config(2, 2));
  auto a = std::make_unique<Node>(job, "a1");
  auto b = std::make_unique<Node>(job, "b2");
  auto fa = a->join_async(), fb = b->join_async();
  RoundAnswer ra = get(fa), rb = get(fb);
  a->participant->report(ra.round, success());
  CHECK_FALSE(job.coordinator.wait_until_drained(50ms));
  b->participant->report(rb.round, success());
  auto ev = a->control.pop();
  REQUIRE(ev);
  CHECK(ev->kind == ControlEvent::Kind::kClosed);
  CHECK(ev->exit_code == 0);
  // The coordinator counts itself closed before any agent can read the close: the store host's
  // agent asks closed() to decide whether to wait for the others to leave.
  for (Node* n : {a.get(), b.get()}) {
    auto closed = n->coordinator_closed_at_close.pop();
    REQUIRE(closed);
    CHECK(*closed);
  }
  a.reset();
  b.reset();
  CHECK(job.coordinator.wait_until_drained(5s));
}

TEST_CASE("a lost node ends the round; survivors re-form without a restart", "[rendezvous]") {
  auto cfg = config(2, 3);
  cfg.last_call_timeout = 60s;  // survivors must not wait it out: get() below is bounded by 10 s
  Job job(cfg);
  auto a = std::make_unique<Node>(job, "a1", 0);
  auto b = std::make_unique<Node>(job, "b2", 1);
  auto c = std::make_unique<Node>(job, "c3", 2);
  auto fa = a->join_async(), fb = b->join_async(), fc = c->join_async();
  get(fa);
  get(fb);
  get(fc);
  c.reset();  // its agent dies: the ephemeral alive key goes with its connection
  for (Node* n : {a.get(), b.get()}) {
    auto ev = n->control.pop();
    REQUIRE(ev);
    CHECK(ev->kind == ControlEvent::Kind::kStop);
    CHECK_FALSE(ev->failure);
    CHECK(ev->restart_count == 0);
    CHECK_THAT(ev->detail, Catch::Contains("c3") && Catch::Contains("lost"));
  }
  fa = a->join_async();
  fb = b->join_async();
  RoundAnswer ra = get(fa);
  get(fb);
  CHECK(ra.round == 1);
  CHECK(ra.nnodes == 2);
  CHECK(ra.restart_count == 0);
}

TEST_CASE("a late joiner scales the job up in a new round", "[rendezvous]") {
  Job job(config(2, 3));
  Node a(job, "a1", 0), b(job, "b2", 1);
  auto fa = a.join_async(), fb = b.join_async();
  REQUIRE(get(fa).nnodes == 2);
  get(fb);
  Node c(job, "c3", 2);
  auto fc = c.join_async();
  for (Node* n : {&a, &b}) {
    auto ev = n->control.pop();
    REQUIRE(ev);
    CHECK_FALSE(ev->failure);
    CHECK_THAT(ev->detail, Catch::Contains("scaling up"));
  }
  fa = a.join_async();
  fb = b.join_async();
  RoundAnswer ra = get(fa), rc = get(fc);
  get(fb);
  CHECK(ra.nnodes == 3);
  CHECK(ra.round == 1);
  CHECK(ra.restart_count == 0);
  CHECK(rc.node_rank == 2);
}

// The workers share this store (torchrun's agent store): a membership round keeps the restart
// count, so the next group would find the last group's keys under the same //worker/attempt_0/.
TEST_CASE("a new round clears the workers' keys before its answers; the rendezvous keys stay", "[rendezvous]") {
  Job job(config(2, 3));
  Node a(job, "a1", 0), b(job, "b2", 1);
  auto fa = a.join_async(), fb = b.join_async();
  REQUIRE(get(fa).restart_count == 0);
  get(fb);
  auto workers = job.fixture.client();  // what the first group's ranks wrote
  workers->set("//worker/attempt_0/default_pg/0/0/rank_0", "10.9.0.1:4242");
  workers->set("//worker/attempt_0/store_based_barrier_key:1", "4");
  workers->set("init/", "4");
  Node c(job, "c3", 2);
  auto fc = c.join_async();
  for (Node* n : {&a, &b}) REQUIRE(n->control.pop());
  fa = a.join_async();
  fb = b.join_async();
  RoundAnswer ra = get(fa);
  get(fb);
  get(fc);
  CHECK(ra.restart_count == 0);  // the same attempt prefix
  CHECK(workers->list_keys("//worker/", 100).empty());
  CHECK(workers->try_get("init/") == std::optional<std::string>("4"));  // not under the workers' root
  CHECK_FALSE(workers->list_keys("crun/rdzv/", 1000).empty());
}

TEST_CASE("a node that stops heartbeating is dropped", "[rendezvous]") {
  auto cfg = config(1, 2);
  cfg.heartbeat_timeout = 500ms;
  Job job(cfg);
  Node a(job, "a1", 0);
  // A silent node: joins and stays connected (alive), but never heartbeats, like a partitioned host.
  TcpStore silent(job.fixture.endpoint());
  RendezvousKeys keys(cfg.run_id);
  NodeRecord ghost;
  ghost.node_id = "ghost:1:0";
  ghost.hostname = "ghost";
  ghost.addr = "10.9.0.9";
  ghost.seq = 1;
  ghost.rank_hint = 1;
  ghost.nproc = 2;
  ghost.min_nodes = 1;
  ghost.max_nodes = 2;
  ghost.program = "train";
  silent.set_ephemeral(keys.alive(ghost.node_id), "ghost");
  silent.set(keys.join(ghost.node_id), ghost.to_json());
  auto fa = a.join_async();
  REQUIRE(get(fa).nnodes == 2);
  auto ev = a.control.pop(5s);  // bounded detection: 500 ms timeout, scanned every 125 ms
  REQUIRE(ev);
  CHECK_THAT(ev->detail, Catch::Contains("ghost") && Catch::Contains("no heartbeat"));
  CHECK_FALSE(silent.try_get(keys.alive(ghost.node_id)).has_value());
}

TEST_CASE("join times out with a clear error when too few nodes come", "[rendezvous]") {
  auto cfg = config(2, 2);
  cfg.join_timeout = 300ms;
  Job job(cfg);
  Node a(job, "a1");
  try {
    join_now(*a.participant, 1);
    FAIL("join must time out");
  } catch (const RendezvousTimeout& e) {
    CHECK_THAT(e.what(), Catch::Contains("join timeout") && Catch::Contains("job42"));
  }
}

TEST_CASE("the loss of the store reaches every participant", "[rendezvous]") {
  auto job = std::make_unique<Job>(config(1, 1));
  Node a(*job, "a1");
  auto fa = a.join_async();
  get(fa);
  job->fixture.server.stop();
  auto why = a.lost.pop(5s);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("127.0.0.1"));
}

TEST_CASE("records carry worker output that is not UTF-8", "[rendezvous]") {
  RoundOutcome o;
  o.exit_code = 1;
  o.report = std::string("stderr: \xff\xfe latin-1 \xe9 and a cut multibyte \xe2\x82");
  RoundOutcome back = RoundOutcome::from_json(o.to_json());  // never throws on such bytes
  CHECK(back.exit_code == 1);
  CHECK_THAT(back.report, Catch::Contains("latin-1") && Catch::Contains("\xef\xbf\xbd"));  // U+FFFD
}

TEST_CASE("a record's numbers must fit their fields", "[rendezvous]") {
  // Found by tests/fuzz/rendezvous_records: a free_port of 2.95e128 was converted to uint16_t
  // (undefined behaviour), and 65536 wrapped to port 0; a peer's out-of-range number is malformed.
  NodeRecord n;
  n.node_id = "a";
  const std::string good = n.to_json();
  auto with = [&](const std::string& field, const std::string& value) {
    const auto at = good.find("\"" + field + "\":");
    REQUIRE(at != std::string::npos);
    const auto start = good.find(':', at) + 1, end = good.find_first_of(",}", start);
    return good.substr(0, start) + value + good.substr(end);
  };
  CHECK(NodeRecord::from_json(with("free_port", "65535")).free_port == 65535);
  CHECK(NodeRecord::from_json(with("rank_hint", "-2147483648")).rank_hint == INT32_MIN);
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"free_port", "295006666666666666666666666666666666"}, {"free_port", "65536"}, {"free_port", "-1"},
           {"free_port", "29500.5"}, {"nproc", "2147483648"}, {"rank_hint", "-2147483649"}, {"seq", "1e300"},
           {"nproc", "true"}}) {
    CHECK_THROWS_WITH(NodeRecord::from_json(with(field, value)), Catch::Contains("bad '" + field + "'"));
  }
  RoundOutcome o;
  const std::string outcome = o.to_json();
  const auto at = outcome.find("\"wall_time_us\":");
  const std::string big = outcome.substr(0, at) + "\"wall_time_us\":9223372036854775808" +
                          outcome.substr(outcome.find_first_of(",}", at));
  CHECK_THROWS_WITH(RoundOutcome::from_json(big), Catch::Contains("bad 'wall_time_us'"));
}

TEST_CASE("the host's configuration is the reference, not the first joiner's", "[rendezvous]") {
  ServerFixture fixture;
  auto cfg = config(2, 2);
  NodeRecord host_record;
  host_record.node_id = "host:1:0";
  host_record.hostname = "host";
  host_record.nproc = 2;
  host_record.min_nodes = host_record.max_nodes = 2;
  host_record.program = "train";
  EventQueue<std::string> log;
  RendezvousCoordinator coordinator(fixture.endpoint(), {}, cfg, [&](const std::string& l) { log.push(l); }, host_record);
  auto make = [&](const std::string& name, int nproc) {
    NodeRecord r = host_record;
    r.node_id = make_node_id(name);
    r.hostname = name;
    r.addr = "10.9.0." + std::to_string(name.back() - '0');
    r.nproc = nproc;
    return std::make_unique<LoopParticipant>(fixture.endpoint(), StoreClientOptions{}, cfg, r, ParticipantEvents{});
  };
  auto stale = make("z9", 8);  // a stale command joins first
  auto rz = start_join(*stale, 1);
  REQUIRE(rz.wait_for(10s) == std::future_status::ready);
  CHECK_THAT(rz.get().error, Catch::Contains("nproc 8 vs 2") && Catch::Contains("host"));
  auto a = make("a1", 2), b = make("b2", 2);
  auto fa = start_join(*a, 1);
  auto fb = start_join(*b, 2);
  REQUIRE(fa.wait_for(10s) == std::future_status::ready);
  REQUIRE(fb.wait_for(10s) == std::future_status::ready);
  CHECK(fa.get().error.empty());
  CHECK(fb.get().nnodes == 2);
}

TEST_CASE("an evicted node that rejoins is counted alive again", "[rendezvous]") {
  auto cfg = config(2, 2);
  cfg.heartbeat_timeout = 600ms;
  Job job(cfg);
  Node a(job, "a1", 0), b(job, "b2", 1);
  auto fa = a.join_async(), fb = b.join_async();
  get(fa);
  get(fb);
  // Evict b as a missed heartbeat would: its ephemeral alive key disappears.
  TcpStore admin(job.fixture.endpoint());
  admin.remove(RendezvousKeys(cfg.run_id).alive(b.participant->node_id()));
  REQUIRE(a.control.pop());
  REQUIRE(b.control.pop());
  fa = a.join_async();
  fb = b.join_async();
  RoundAnswer ra = get(fa);
  get(fb);
  CHECK(ra.round == 1);
  // Its heartbeats count again: no further eviction over several heartbeat timeouts.
  CHECK_FALSE(a.control.pop(2s).has_value());
}

namespace {
// The run's keys under `sub` (e.g. "answer/"), without the run's prefix.
std::set<std::string> keys_under(Job& job, const std::string& sub) {
  const std::string base = RendezvousKeys(job.cfg.run_id).base;
  std::set<std::string> out;
  for (auto& k : job.fixture.client()->list_keys(base + sub, 100000)) out.insert(k.substr(base.size()));
  return out;
}
}  // namespace

TEST_CASE("keys no agent can still need are pruned: ten restarts leave the last two rounds' keys", "[rendezvous]") {
  Job job(config(2, 2, /*max_restarts=*/20));
  Node a(job, "a1", 0), b(job, "b2", 1);
  const RendezvousKeys& k = a.participant->keys();
  auto writer = job.fixture.client();
  for (int r = 0; r < 10; ++r) {
    auto fa = a.join_async(), fb = b.join_async();
    RoundAnswer ra = get(fa), rb = get(fb);
    REQUIRE(ra.round == r);
    writer->set(k.round_prefix(r) + "worker-key", "x");  // what workers keep under their round
    b.participant->report(rb.round, failure(3, "boom"));
    for (Node* n : {&a, &b}) {
      auto ev = n->control.pop();
      REQUIRE(ev);
      REQUIRE(ev->round == r);
    }
  }
  // Round 9 formed (round 7's keys went) and ended.
  const std::string an = "answer/" + a.participant->node_id() + "/", bn = "answer/" + b.participant->node_id() + "/";
  CHECK(keys_under(job, "answer/") == std::set<std::string>{an + "10", bn + "10"});
  CHECK(keys_under(job, "ctl/stop/") == std::set<std::string>{"ctl/stop/8", "ctl/stop/9"});
  CHECK(keys_under(job, "report/") == std::set<std::string>{"report/8/" + b.participant->node_id(),
                                                            "report/9/" + b.participant->node_id()});
  CHECK(keys_under(job, "round/") == std::set<std::string>{"round/8/worker-key", "round/9/worker-key"});
  CHECK(keys_under(job, "join/").size() == 2);
  CHECK(keys_under(job, "hb/").size() == 2);

  // A report that arrives for a round already pruned is deleted as it comes.
  EventQueue<StoreEvent> events;
  auto watch = writer->watch(k.report(0, ""), [&](const StoreEvent& e) { events.push(e); });
  a.participant->report(0, failure(1, "late"));
  auto set = events.pop();
  REQUIRE(set);
  CHECK(set->kind == StoreEvent::Kind::kSet);
  auto gone = events.pop();
  REQUIRE(gone);
  CHECK(gone->kind == StoreEvent::Kind::kDelete);
  CHECK(gone->key == k.report(0, a.participant->node_id()));
}

TEST_CASE("a report does not wait for the store; one it does not take is the store lost", "[rendezvous]") {
  // report() runs on the agent's event loop (publish_failure, publish_success): it must not block
  // it for a round trip, let alone for the requests' timeout.
  HandStoreServer hand;
  auto cfg = config(1, 1);
  cfg.heartbeat_timeout = 60s;  // heartbeats go unanswered too, but only the report's deadline passes
  cfg.keep_alive_interval = 300ms;
  StoreClientOptions options;
  options.timeout = 2s;
  NodeRecord self;
  self.node_id = make_node_id("a1");
  self.hostname = "a1";
  EventQueue<std::string> lost;
  ParticipantEvents ev;
  ev.on_store_lost = [&lost](const std::string& why) { lost.push(why); };
  LoopParticipant p({"127.0.0.1", hand.listening.port}, options, cfg, self, ev);
  hand.accept_hello();
  hand.answer_hello();
  for (const auto& f : hand.read_frames(2)) hand.reply_ok(f.id);  // the control watch, the first heartbeat
  CHECK_NOTHROW(p.report(0, failure(3, "boom")));
  const auto sent = hand.read_frames(1);  // it went out (before any later heartbeat), and stays unanswered
  REQUIRE(!sent.empty());
  CHECK(sent[0].op == static_cast<std::uint8_t>(wire::Op::kSet));
  CHECK_THAT(sent[0].body, Catch::Contains(RendezvousKeys(cfg.run_id).report(0, p.node_id())));
  const auto why = lost.pop(10s);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::StartsWith("cannot publish this node's outcome: ") && Catch::Contains("no reply within the deadline"));
  CHECK_FALSE(lost.pop(0s));  // once
}

TEST_CASE("a lost node's records are pruned once the others re-formed", "[rendezvous]") {
  auto cfg = config(2, 3);
  cfg.last_call_timeout = 60s;
  Job job(cfg);
  auto a = std::make_unique<Node>(job, "a1", 0);
  auto b = std::make_unique<Node>(job, "b2", 1);
  auto c = std::make_unique<Node>(job, "c3", 2);
  auto fa = a->join_async(), fb = b->join_async(), fc = c->join_async();
  get(fa);
  get(fb);
  get(fc);
  const std::string lost = c->participant->node_id();
  CHECK(keys_under(job, "join/").count("join/" + lost) == 1);
  c.reset();
  for (Node* n : {a.get(), b.get()}) REQUIRE(n->control.pop());
  fa = a->join_async();
  fb = b->join_async();
  get(fa);
  get(fb);
  // The coordinator deleted them before it formed round 1.
  for (const char* sub : {"join/", "hb/", "answer/"}) {
    for (const auto& key : keys_under(job, sub)) CHECK(key.find(lost) == std::string::npos);
  }
  CHECK(keys_under(job, "join/").size() == 2);
}

namespace {
int threads_of_this_process() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}
}  // namespace

TEST_CASE("a participant runs on its owner's loop: no thread of its own once connected", "[rendezvous]") {
  Job job(config(1, 1));
  const int before = threads_of_this_process();
  {
    Node a(job, "a1");  // its loop's thread (the agent's main thread), and a helper while it connects
    RoundAnswer r = join_now(*a.participant, 1);
    CHECK(r.error.empty());
    a.participant->publish_status("{}", true);  // node rank 0 reads every status back, on the loop too
    REQUIRE(eventually([&] { return a.participant->job_status().size() == 1; }));
    CHECK(eventually([&] { return threads_of_this_process() == before + 1; }));  // the connecting helper ended
  }
  CHECK(threads_of_this_process() == before);
}

TEST_CASE("a store that cannot be reached fails the join as unreached", "[rendezvous]") {
  auto cfg = config(1, 1);
  cfg.join_timeout = 200ms;  // also the connection's retry bound
  NodeRecord r;
  r.node_id = make_node_id("a1");
  r.hostname = "a1";
  LoopbackSocket refusing(LoopbackSocket::Mode::kBound);  // bound, never listening: refuses, for the test's life
  LoopParticipant p({"127.0.0.1", refusing.port}, StoreClientOptions{}, cfg, r, ParticipantEvents{});
  auto done = std::make_shared<std::promise<JoinResult>>();
  p.join([](const std::string&) { return std::uint16_t{1}; }, [done](JoinResult jr) { done->set_value(std::move(jr)); });
  auto result = done->get_future();
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  JoinResult jr = result.get();
  CHECK_FALSE(jr.reached_store);
  CHECK_FALSE(jr.answer);
  CHECK_THROWS_WITH(std::rethrow_exception(jr.error), Catch::Contains("cannot connect"));
  // A later join fails the same way at once.
  auto again = std::make_shared<std::promise<JoinResult>>();
  p.join([](const std::string&) { return std::uint16_t{1}; }, [again](JoinResult j) { again->set_value(std::move(j)); });
  CHECK_FALSE(again->get_future().get().reached_store);
}

// The closing job's stacks (agent/closing_stacks.h): node rank 0's get parks at the store until
// node 1 writes its record; the record outlives node 1's participant; one never written comes
// back empty once the wait is over.
TEST_CASE("a node's stacks record outlives it; node rank 0's wait for one parks at the store, bounded", "[rendezvous]") {
  Job job(config(2, 2));
  Node a(job, "a1", 0), b(job, "b2", 1);
  auto fa = a.join_async(), fb = b.join_async();
  const RoundAnswer ra = get(fa);
  get(fb);
  EventQueue<std::optional<std::string>> arrived;
  a.participant->await_stacks(ra.round, 1, 10s, [&](std::optional<std::string> v) { arrived.push(std::move(v)); });
  EventQueue<bool> taken;
  b.participant->publish_stacks(ra.round, 1, "{\"node 1\":1}", [&](bool t) { taken.push(t); });
  const auto t = taken.pop();
  REQUIRE(t);
  CHECK(*t);
  const auto first = arrived.pop();
  REQUIRE(first);
  CHECK(*first == std::optional<std::string>("{\"node 1\":1}"));
  b.participant.reset();  // node 1 leaves: its ephemeral keys go, its record stays
  a.participant->await_stacks(ra.round, 1, 10s, [&](std::optional<std::string> v) { arrived.push(std::move(v)); });
  const auto again = arrived.pop();
  REQUIRE(again);
  CHECK(*again == std::optional<std::string>("{\"node 1\":1}"));
  CHECK(keys_under(job, "round/") == std::set<std::string>{"round/" + std::to_string(ra.round) + "/stacks/1"});
  const auto asked = std::chrono::steady_clock::now();
  a.participant->await_stacks(ra.round, 2, 300ms, [&](std::optional<std::string> v) { arrived.push(std::move(v)); });
  const auto none = arrived.pop();
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  CHECK(std::chrono::steady_clock::now() - asked >= 300ms);
}
