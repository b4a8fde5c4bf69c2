// Two crun agents on 127.0.0.1 (c10d, the first hosts the store), each agent in turn stopped with
// SIGSTOP for just under and just over the heartbeat timeout. Under it nothing changes: no round
// ends, no worker is stopped. Over it: a stalled peer is lost and the round re-forms without a
// restart; a stalled host finds that every peer gave up on its store and ends the job with exit 7
// at once, not after the join timeout.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "rendezvous/rendezvous_records.h"
#include "store/blocking_store_channel.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback_socket.h"

using namespace crun;
using namespace crun::test;

namespace {

// heartbeat_timeout 2 s, a heartbeat every second; join_timeout far above every bound below.
constexpr auto kTimeout = 2s;
constexpr auto kInterval = 1s;
const std::string kConf = "heartbeat_timeout=2,keep_alive_interval=1,join_timeout=600";
constexpr auto kUnder = 1900ms;
constexpr auto kOver = 4500ms;  // past heartbeat_timeout + keep_alive_interval by more than a scan

std::string free_loopback_port() { return std::to_string(LoopbackSocket(LoopbackSocket::Mode::kBound).port); }

std::vector<std::string> agent_argv(const std::string& port, bool host) {
  return {CRUN_BIN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
          "127.0.0.1:" + port, "--rdzv-id", "stall", "--rdzv-conf", kConf + (host ? ",is_host=1" : ",is_host=0"),
          "--no-python", CRUN_TEST_WORKER, "--print-env", "--fail-on-signal", "SIGUSR1", "--exit", "0"};
}

// Every heartbeat the store takes, per agent pid, as a watch on hb/ sees it.
class Heartbeats {
 public:
  explicit Heartbeats(const std::string& port)
      : channel_(StoreEndpoint{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(port))}, options(), [](const std::string&) {}) {
    channel_.watch(RendezvousKeys("stall").heartbeat_prefix(), [this](const StoreEvent& e) { seen(e); },
                   BlockingStoreChannel::Clock::now() + 30s);
  }
  int count(pid_t agent) {
    std::lock_guard lock(mu_);
    return beats_[agent];
  }
  // Waits until `agent` beat `n` times more than `from`; the time of that beat.
  std::optional<BlockingStoreChannel::Clock::time_point> wait(pid_t agent, int from, int n, std::chrono::milliseconds bound) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, bound, [&] { return beats_[agent] >= from + n; })) return std::nullopt;
    return last_[agent];
  }

 private:
  static StoreClientOptions options() {
    StoreClientOptions o;
    o.local_socket = false;
    return o;
  }
  void seen(const StoreEvent& e) {
    if (e.kind != StoreEvent::Kind::kSet) return;
    const auto colon = e.key.find(':');  // node ids are "<hostname>:<pid>:<hex>"
    if (colon == std::string::npos) return;
    const pid_t pid = std::atoi(e.key.c_str() + colon + 1);
    std::lock_guard lock(mu_);
    ++beats_[pid];
    last_[pid] = BlockingStoreChannel::Clock::now();
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<pid_t, int> beats_;
  std::map<pid_t, BlockingStoreChannel::Clock::time_point> last_;
  BlockingStoreChannel channel_;  // last: its thread calls seen() until it ends
};

// The pid of the worker in "ready rank=R pid=P" (the n-th such line, from 1).
pid_t worker_pid(ChildProcess& agent, int n = 1) {
  REQUIRE(agent.wait_for_stdout("ready rank=", n, 30s));
  const auto said = lines(agent.out());
  int seen = 0;
  for (const auto& line : said) {
    int rank = 0, pid = 0;
    if (std::sscanf(line.c_str(), "ready rank=%d pid=%d", &rank, &pid) == 2 && ++seen == n) return pid;
  }
  FAIL("no ready line");
  return -1;
}

struct TwoAgents {
  std::string port = free_loopback_port();
  ChildProcess host{agent_argv(port, true)};
  std::unique_ptr<ChildProcess> peer;
  std::unique_ptr<Heartbeats> beats;
  pid_t host_worker = -1, peer_worker = -1;

  TwoAgents() {
    REQUIRE(host.wait_until([](const std::string&, const std::string& err) { return err.find("hosting the rendezvous") != std::string::npos; }, 30s));
    peer = std::make_unique<ChildProcess>(agent_argv(port, false));
    beats = std::make_unique<Heartbeats>(port);
    host_worker = worker_pid(host);
    peer_worker = worker_pid(*peer);
  }
  ~TwoAgents() {
    beats.reset();
    for (ChildProcess* p : {peer.get(), &host}) {
      p->signal(SIGCONT);
      p->signal(SIGTERM);
      p->wait_exit(30s);
    }
  }

  // Stops `agent` for `stall` (SIGSTOP, SIGCONT), right after its heartbeat plus `into` of its
  // keep_alive_interval: with `into` near the interval, its next heartbeat was about due.
  void stall(ChildProcess& agent, std::chrono::milliseconds stall, std::chrono::milliseconds into) {
    const int before = beats->count(agent.pid());
    const auto beat = beats->wait(agent.pid(), before, 1, 10s);
    REQUIRE(beat);
    std::this_thread::sleep_until(*beat + into);  // the stall's place in the heartbeat cycle
    REQUIRE(::kill(agent.pid(), SIGSTOP) == 0);
    std::this_thread::sleep_for(stall);  // the stall itself
    REQUIRE(::kill(agent.pid(), SIGCONT) == 0);
  }

  // Waits until both agents' heartbeats reached the store 4 times since now: the coordinator has
  // scanned (every heartbeat_timeout / 4) with every heartbeat the stall held up delivered.
  void settle() {
    const int h = beats->count(host.pid()), p = beats->count(peer->pid());
    REQUIRE(beats->wait(host.pid(), h, 4, 20s));
    REQUIRE(beats->wait(peer->pid(), p, 4, 20s));
  }

  // Ends the workers (SIGUSR1: they exit 0); both agents then exit 0.
  void finish(pid_t host_w, pid_t peer_w) {
    CHECK(::kill(host_w, SIGUSR1) == 0);
    CHECK(::kill(peer_w, SIGUSR1) == 0);
    for (ChildProcess* p : {peer.get(), &host}) {
      const auto ended = p->wait_exit(30s);
      INFO(p->err() << "\n" << exit_text(ended));
      CHECK(ended == 0);
    }
  }
};

void nothing_changed(TwoAgents& job) {
  job.settle();
  for (ChildProcess* p : {&job.host, job.peer.get()}) {
    INFO(p->err());
    CHECK(p->err().find("ended") == std::string::npos);
    CHECK(p->err().find("lost") == std::string::npos);
  }
  job.finish(job.host_worker, job.peer_worker);  // the workers started first are still there
  const std::string out = job.host.out() + job.peer->out();
  CHECK(count(out, "TORCHELASTIC_RESTART_COUNT=0") == 2);
  CHECK(count(out, "ready rank=") == 2);
}

}  // namespace

TEST_CASE("the store's host stalled for just under heartbeat_timeout: nothing changes", "[agent_stall]") {
  TwoAgents job;
  job.stall(job.host, kUnder, kInterval - 200ms);
  nothing_changed(job);
}

TEST_CASE("a peer stalled for just under heartbeat_timeout: nothing changes", "[agent_stall]") {
  TwoAgents job;
  // Stopped 0.8 s after a heartbeat: silent for 2.7 s, more than heartbeat_timeout, less than
  // heartbeat_timeout after its next heartbeat was due.
  job.stall(*job.peer, kUnder, kInterval - 200ms);
  nothing_changed(job);
}

TEST_CASE("a peer stalled past heartbeat_timeout is lost; the round re-forms without a restart", "[agent_stall]") {
  TwoAgents job;
  job.stall(*job.peer, kOver, 0ms);
  REQUIRE(job.host.wait_until([](const std::string&, const std::string& err) { return err.find("round 1: node rank 0 of 2, restart 0") != std::string::npos; }, 30s));
  CHECK_THAT(job.host.err(), Catch::Contains("no heartbeat for 3 s"));
  const pid_t host_w = worker_pid(job.host, 2), peer_w = worker_pid(*job.peer, 2);
  job.finish(host_w, peer_w);
  CHECK(count(job.host.out() + job.peer->out(), "TORCHELASTIC_RESTART_COUNT=0") == 4);
}

TEST_CASE("the store's host stalled past every peer's heartbeat wait ends the job with exit 7 at once",
          "[agent_stall]") {
  TwoAgents job;
  job.stall(job.host, kOver, 0ms);
  // Each peer's heartbeat waited more than heartbeat_timeout: it gave up on the store.
  const auto peer_end = job.peer->wait_exit(30s);
  INFO(job.peer->err());
  CHECK(peer_end == 7);
  // The host knows it: it does not wait join_timeout (600 s) for a node that will not come.
  const auto host_end = job.host.wait_exit(30s);
  INFO(job.host.err() << "\n" << exit_text(host_end));
  CHECK(host_end == 7);
  CHECK_THAT(job.host.err(), Catch::Contains("stalled for") && Catch::Contains("each has given up on the store"));
  (void)kTimeout;
}
