// Two crun agents on etcd-v3 against one etcd member on 127.0.0.1 (lease_ttl 2 s: kept alive every
// 667 ms, granted 3 s), each agent in turn stopped with SIGSTOP for just under lease_ttl, placed
// just before its next keep-alive was due. Under lease_ttl nothing changes: no round ends, no
// worker is stopped, both agents exit 0. Well over the granted TTL the stopped agent's lease
// expires while it is stopped: the other's round ends and it forms the next round alone (a lost
// node: same restart count), and the stopped agent, continued, finds its lease gone and exits 7.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/support/etcd_cluster.h"

using namespace crun::test;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kConf = "lease_ttl=2,join_timeout=600";
constexpr auto kInterval = 667ms;  // lease_ttl / 3: the keep-alives' period
constexpr auto kUnder = 1900ms;    // just under lease_ttl
// Stopped this long after a keep-alive, just before the next one is due: silent for kInto + kUnder
// (2.4 s), over lease_ttl (a lease granted for lease_ttl alone expires) and under the 3 s granted.
constexpr auto kInto = 500ms;
static_assert(kInto < kInterval, "the stop begins before the next keep-alive is due");
constexpr auto kOver = 5s;  // past the granted 3 s and etcd's 0.5 s expiry scan

// A TCP relay on 127.0.0.1 between one agent and the etcd member, both ways, that notes when the
// agent's keep-alive requests ("POST /v3/lease/keepalive" on its lease channel) go by.
class KeepAliveTap {
 public:
  explicit KeepAliveTap(int etcd_port) : etcd_port_(etcd_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    port_ = ntohs(a.sin_port);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    REQUIRE(wake_fd_ >= 0);
    thread_ = std::thread([this] { run(); });
  }
  ~KeepAliveTap() {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    thread_.join();
    for (const Pair& p : pairs_) {
      ::close(p.agent);
      ::close(p.etcd);
    }
    ::close(listen_fd_);
    ::close(wake_fd_);
  }
  KeepAliveTap(const KeepAliveTap&) = delete;
  KeepAliveTap& operator=(const KeepAliveTap&) = delete;

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int count() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  // Waits until `n` keep-alives more than `from` went by; the time of the last of them.
  std::optional<Clock::time_point> wait(int from, int n, std::chrono::milliseconds bound) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, bound, [&] { return seen_ >= from + n; })) return std::nullopt;
    return last_;
  }

 private:
  struct Pair {
    int agent = -1, etcd = -1;
    std::string tail;  // the last bytes from the agent, for a request line split between reads
  };
  static constexpr std::string_view kNeedle = "POST /v3/lease/keepalive ";

  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
  }
  static bool send_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }
  void accept_one() {
    const int agent = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (agent < 0) return;
    const int etcd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in to = loopback(etcd_port_);
    if (etcd < 0 || ::connect(etcd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
      ::close(agent);
      if (etcd >= 0) ::close(etcd);
      return;
    }
    pairs_.push_back({agent, etcd, {}});
  }
  // Relays what `from` has; false when that connection ended (both sides are then closed).
  bool relay(Pair& p, bool from_agent) {
    char buf[65536];
    const ssize_t n = ::recv(from_agent ? p.agent : p.etcd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    if (from_agent) {
      std::string text = p.tail + std::string(buf, static_cast<std::size_t>(n));
      int found = 0;
      for (auto at = text.find(kNeedle); at != std::string::npos; at = text.find(kNeedle, at + 1)) ++found;
      p.tail = text.substr(text.size() > kNeedle.size() ? text.size() - (kNeedle.size() - 1) : 0);
      if (found > 0) {
        std::lock_guard lock(mu_);
        seen_ += found;
        last_ = Clock::now();
        cv_.notify_all();
      }
    }
    return send_all(from_agent ? p.etcd : p.agent, buf, static_cast<std::size_t>(n));
  }
  void run() {
    for (;;) {
      std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (const Pair& p : pairs_) {
        fds.push_back({p.agent, POLLIN, 0});
        fds.push_back({p.etcd, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents) return;
      std::vector<Pair> kept;
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        Pair& p = pairs_[i];
        bool open = true;
        if (fds[2 + 2 * i].revents) open = relay(p, true);
        if (open && fds[3 + 2 * i].revents) open = relay(p, false);
        if (open) {
          kept.push_back(std::move(p));
        } else {
          ::close(p.agent);
          ::close(p.etcd);
        }
      }
      pairs_ = std::move(kept);
      if (fds[1].revents) accept_one();
    }
  }

  const int etcd_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<Pair> pairs_;  // the relay thread's
  std::mutex mu_;
  std::condition_variable cv_;
  int seen_ = 0;
  Clock::time_point last_;
  std::thread thread_;  // last: it uses everything above
};

int port_of(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

// --nnodes 1:2: a node lost for good leaves the other to form the next round alone.
std::vector<std::string> agent_argv(const KeepAliveTap& tap, const std::string& run_id) {
  return {CRUN_BIN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint",
          tap.endpoint(), "--rdzv-id", run_id, "--rdzv-conf", kConf, "--no-python", CRUN_TEST_WORKER,
          "--print-env", "--fail-on-signal", "SIGUSR1", "--exit", "0"};
}

// The pid of the worker in "ready rank=R pid=P" (the n-th such line, from 1).
pid_t worker_pid(ChildProcess& agent, int n = 1) {
  const bool ready = agent.wait_for_stdout("ready rank=", n, 30s);
  INFO(agent.err());
  REQUIRE(ready);
  int seen = 0;
  for (const auto& line : lines(agent.out())) {
    int rank = 0, pid = 0;
    if (std::sscanf(line.c_str(), "ready rank=%d pid=%d", &rank, &pid) == 2 && ++seen == n) return pid;
  }
  FAIL("no ready line");
  return -1;
}

struct TwoAgents {
  EtcdCluster etcd{EtcdCluster::Loopback{}};
  KeepAliveTap tap_a{port_of(etcd.endpoint(0))}, tap_b{port_of(etcd.endpoint(0))};
  ChildProcess a{agent_argv(tap_a, "stall")};
  ChildProcess b{agent_argv(tap_b, "stall")};
  pid_t a_worker = -1, b_worker = -1;

  TwoAgents() {
    a_worker = worker_pid(a);
    b_worker = worker_pid(b);
    INFO(a.err() << b.err());
    REQUIRE(count(a.err() + b.err(), "of 2, restart 0") == 2);  // one round of both
  }
  ~TwoAgents() {
    for (ChildProcess* p : {&a, &b}) {
      p->signal(SIGCONT);
      p->signal(SIGTERM);
      p->wait_exit(30s);
    }
  }

  // Stops `agent` (SIGSTOP) `into` after one of its keep-alives went to etcd; the time it stopped.
  Clock::time_point stop_after_keep_alive(ChildProcess& agent, KeepAliveTap& tap, std::chrono::milliseconds into) {
    const auto sent = tap.wait(tap.count(), 1, 10s);
    REQUIRE(sent);
    std::this_thread::sleep_until(*sent + into);  // the stall's place in the keep-alive cycle
    REQUIRE(::kill(agent.pid(), SIGSTOP) == 0);
    return Clock::now();
  }

  // Stops `agent` for kUnder, kInto after a keep-alive (just before the next one is due),
  // continues it, and waits until its second keep-alive since: the first was answered with the
  // lease alive (the next one is timed from that answer; a lease found gone ends the agent).
  void stall_under(ChildProcess& agent, KeepAliveTap& tap) {
    const auto stopped = stop_after_keep_alive(agent, tap, kInto);
    const int before = tap.count();
    std::this_thread::sleep_until(stopped + kUnder);  // the stall itself
    REQUIRE(::kill(agent.pid(), SIGCONT) == 0);
    const bool renewed = tap.wait(before, 2, 10s).has_value();
    INFO("a:\n" << a.err() << "b:\n" << b.err());
    REQUIRE(renewed);
  }
};

}  // namespace

TEST_CASE("each agent stalled for just under lease_ttl before a keep-alive: nothing changes", "[agent_stall]") {
  TwoAgents job;
  job.stall_under(job.a, job.tap_a);
  job.stall_under(job.b, job.tap_b);
  for (ChildProcess* p : {&job.a, &job.b}) {
    INFO(p->err());
    CHECK(p->err().find("ended") == std::string::npos);
    CHECK(p->err().find("lost") == std::string::npos);
  }
  // The workers started first are still there: SIGUSR1 ends them with 0, and both agents exit 0.
  CHECK(::kill(job.a_worker, SIGUSR1) == 0);
  CHECK(::kill(job.b_worker, SIGUSR1) == 0);
  for (ChildProcess* p : {&job.a, &job.b}) {
    const auto ended = p->wait_exit(30s);
    INFO(p->err() << "\n" << exit_text(ended));
    CHECK(ended == 0);
  }
  const std::string out = job.a.out() + job.b.out();
  CHECK(count(out, "TORCHELASTIC_RESTART_COUNT=0") == 2);
  CHECK(count(out, "TORCHELASTIC_RESTART_COUNT=") == 2);
  CHECK(count(out, "ready rank=") == 2);
}

TEST_CASE("an agent stalled well past its lease is lost: the other forms the next round alone, it exits 7",
          "[agent_stall]") {
  TwoAgents job;
  const auto stopped = job.stop_after_keep_alive(job.a, job.tap_a, 0ms);
  // While a is still stopped its lease expires: its keys go, b's round ends and b forms the next
  // round alone, with the same restart count (a lost node is no failure).
  const bool re_formed = job.b.wait_until(
      [](const std::string&, const std::string& err) { return err.find("round 1: node rank 0 of 1, restart 0") != std::string::npos; },
      std::chrono::duration_cast<std::chrono::milliseconds>(stopped + kOver - Clock::now()));
  INFO("a:\n" << job.a.err() << "b:\n" << job.b.err());
  REQUIRE(re_formed);
  std::this_thread::sleep_until(stopped + kOver);  // the rest of the stall
  REQUIRE(::kill(job.a.pid(), SIGCONT) == 0);
  // a finds its lease gone (its keep-alive says so, or its join for round 1 under that lease is
  // refused, whichever comes first): it stops its worker and exits 7.
  const auto a_end = job.a.wait_exit(30s);
  INFO(exit_text(a_end));
  CHECK(a_end == 7);
  CHECK_THAT(job.a.err(), Catch::Contains("lost the rendezvous store: ") &&
                              (Catch::Contains("this node's etcd lease expired") ||
                               Catch::Contains("etcdserver: requested lease not found")));
  CHECK_THAT(job.b.err(), Catch::Contains("round 0 ended: node ") && Catch::Contains(" lost: its agent left or its etcd lease expired"));
  const pid_t b_w = worker_pid(job.b, 2);
  CHECK(::kill(b_w, SIGUSR1) == 0);
  const auto b_end = job.b.wait_exit(30s);
  INFO(exit_text(b_end));
  CHECK(b_end == 0);
  CHECK(count(job.b.out(), "TORCHELASTIC_RESTART_COUNT=0") == 2);
  CHECK(count(job.b.out(), "TORCHELASTIC_RESTART_COUNT=") == 2);
}
