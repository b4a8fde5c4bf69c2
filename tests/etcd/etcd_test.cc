// The etcd-v3 rendezvous against a real etcd: every host a network namespace (Cluster) running an
// etcd member (EtcdCluster) beside a real crun agent. No agent hosts anything, so losing any one
// host, node rank 0's included, leaves the others going. Needs root (CI is root) and etcd.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "tests/support/child_process.h"
#include "tests/support/closing_stacks_job.h"
#include "tests/support/cluster.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/eventually.h"
#include "tests/support/exclusion_job.h"
#include "tests/support/pinned_agent.h"
#include "tests/support/state_digest.h"

using namespace crun::test;

namespace {

// Short enough that a lost agent is noticed within seconds: its lease lives 2 s.
const std::string kTimeouts = "last_call_timeout=1,lease_ttl=2";

// --rdzv-conf of a job on `etcd`: kTimeouts, then the TLS files when etcd serves https.
std::string conf_of(const EtcdCluster& etcd) {
  return etcd.tls_conf().empty() ? kTimeouts : kTimeouts + "," + etcd.tls_conf();
}

// Flags of an etcd-v3 job (run id "job") on every member of `etcd`.
std::vector<std::string> etcd_v3(const EtcdCluster& etcd, const std::string& nnodes, int nproc, int max_restarts = 0,
                                 const std::string& conf = "") {
  return {"--nnodes", nnodes, "--nproc-per-node", std::to_string(nproc), "--rdzv-backend", "etcd-v3",
          "--rdzv-endpoint", etcd.endpoints(), "--rdzv-id", "job", "--max-restarts", std::to_string(max_restarts),
          "--rdzv-conf", conf.empty() ? conf_of(etcd) : conf, "--stop-timeout", "5"};
}

// Waits (bound 30 s) until the agent says "round R: node rank K of N, restart C"; returns K, or -1.
int node_rank(ChildProcess& agent, int round, int nodes, int restart = 0) {
  return node_rank_of(agent, round, nodes, restart);
}

// Starts one agent per host; returns them by host.
std::map<int, ChildProcess*> agents_on(Cluster& cl, const std::vector<int>& hosts, const std::vector<std::string>& flags,
                                       const std::vector<std::string>& worker_args) {
  std::map<int, ChildProcess*> agents;
  for (int h : hosts) agents[h] = &cl.crun(h, flags, worker_args);
  return agents;
}

// Waits until every agent is in round `round` of agents.size() nodes; returns host -> node rank.
// REQUIRE: the node ranks are 0..n-1.
std::map<int, int> formed(const std::map<int, ChildProcess*>& agents, int round = 0, int restart = 0) {
  std::map<int, int> ranks;
  std::set<int> seen;
  for (const auto& [h, p] : agents) {
    ranks[h] = node_rank(*p, round, static_cast<int>(agents.size()), restart);
    seen.insert(ranks[h]);
  }
  std::string all;
  for (const auto& [h, p] : agents) all += "agent on host " + std::to_string(h) + ":\n" + p->err();
  INFO("waiting for round " << round << ", restart " << restart << " on every agent\n" << all);
  REQUIRE(seen.count(-1) == 0);
  REQUIRE(static_cast<int>(seen.size()) == static_cast<int>(agents.size()));
  REQUIRE(*seen.rbegin() == static_cast<int>(agents.size()) - 1);
  return ranks;
}

int host_of_rank(const std::map<int, int>& ranks, int rank) {
  for (const auto& [h, r] : ranks)
    if (r == rank) return h;
  return -1;
}

// Pids from the test worker's "ready rank=R pid=P" lines (waits, bound 30 s, for `n` of them).
std::vector<pid_t> ready_pids(ChildProcess& agent, int n = 1) {
  REQUIRE(agent.wait_for_stdout("ready rank=", n));
  std::vector<pid_t> pids;
  for (const auto& line : lines(agent.out())) {
    int rank = -1, pid = -1;
    if (std::sscanf(line.c_str(), "ready rank=%d pid=%d", &rank, &pid) == 2) pids.push_back(pid);
  }
  return pids;
}

std::set<std::string> env_values(const std::string& out, const std::string& key) {
  std::set<std::string> values;
  for (const auto& line : lines(out)) {
    const auto at = line.find(" " + key + "=");
    if (line.rfind("ENV ", 0) == 0 && at != std::string::npos) values.insert(line.substr(at + key.size() + 2));
  }
  return values;
}

// The agent's stderr has one line that names `endpoint` and says what went wrong with TLS.
bool one_tls_line(const std::string& err, const std::string& endpoint) {
  for (auto line : lines(err)) {
    std::transform(line.begin(), line.end(), line.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool tls = line.find("certificate") != std::string::npos || line.find("tls") != std::string::npos ||
                     line.find("ssl") != std::string::npos || line.find("handshake") != std::string::npos;
    if (tls && line.find(endpoint) != std::string::npos) return true;
  }
  return false;
}

std::string sha(const std::string& out) {
  const auto at = out.find("weights_sha256=");
  return at == std::string::npos ? std::string() : out.substr(at + 15, 64);
}

}  // namespace

// ---- the harness alone (no crun) -----------------------------------------------------------

TEST_CASE("three etcd members on three hosts serve, and two go on when the leader is killed", "[etcd_cluster]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  CHECK(etcd.endpoints() == "10.77.0.1:2379,10.77.0.2:2379,10.77.0.3:2379");
  const std::string health = etcd.etcdctl(1, {"endpoint", "health", "--cluster"});
  for (int h = 1; h <= 3; ++h) CHECK_THAT(health, Catch::Contains(Cluster::addr(h) + ":2379 is healthy"));
  const int leader = etcd.leader();
  etcd.kill_member(leader);
  std::vector<int> rest;
  for (int h = 1; h <= 3; ++h)
    if (h != leader) rest.push_back(h);
  etcd.etcdctl(rest[0], {"put", "/harness/k", "v1"});
  CHECK_THAT(etcd.etcdctl(rest[1], {"get", "/harness/k"}), Catch::Contains("/harness/k\nv1"));
  CHECK(etcd.leader() != leader);
  etcd.outlive_lease(rest[1], 2);  // leases still expire: the two keep a quorum
}

TEST_CASE("an https etcd cluster serves only clients with a certificate of its CA", "[etcd_cluster]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3}, EtcdCluster::Tls::on);
  const auto& tls = etcd.tls();
  CHECK(etcd.tls_conf() == "protocol=https,cacert=" + tls.ca + ",cert=" + tls.cert + ",key=" + tls.key);
  CHECK_THAT(etcd.etcdctl(2, {"endpoint", "health", "--cluster"}), Catch::Contains("https://10.77.0.3:2379 is healthy"));
  etcd.etcdctl(1, {"put", "/harness/tls", "v2"});
  etcd.kill_member(1);
  CHECK_THAT(etcd.etcdctl(3, {"get", "/harness/tls"}), Catch::Contains("/harness/tls\nv2"));
  // The JSON gateway crun speaks: the client certificate is required, the server's is checked.
  const std::string range = R"({"key":"L2hhcm5lc3MvdGxz"})";  // base64 of /harness/tls
  auto curl = [&](const std::vector<std::string>& tls_args) {
    std::vector<std::string> argv{"/usr/bin/curl", "-sS", "--max-time", "10"};
    argv.insert(argv.end(), tls_args.begin(), tls_args.end());
    argv.insert(argv.end(), {"https://10.77.0.2:2379/v3/kv/range", "-d", range});
    auto& p = cl.start(2, argv);
    const auto code = p.wait_exit(30s);
    INFO("curl " << tls_args.front() << ": exit " << code.value_or(-1) << "\n" << p.out() << p.err());
    return std::make_pair(code.value_or(-1), p.out());
  };
  const auto good = curl({"--cacert", tls.ca, "--cert", tls.cert, "--key", tls.key});
  CHECK(good.first == 0);
  CHECK_THAT(good.second, Catch::Contains("\"value\":\"djI=\""));  // base64 of v2
  CHECK(curl({"--cacert", tls.ca}).first != 0);                                       // no client certificate
  CHECK(curl({"--cacert", tls.other_ca, "--cert", tls.cert, "--key", tls.key}).first != 0);  // wrong CA
}

TEST_CASE("one etcd member on loopback at free ports, plain and https", "[etcd_loopback]") {
  for (auto tls : {EtcdCluster::Tls::off, EtcdCluster::Tls::on}) {
    EtcdCluster etcd(EtcdCluster::Loopback{}, tls);
    CHECK_THAT(etcd.endpoints(), Catch::StartsWith("127.0.0.1:") && !Catch::Contains(","));
    etcd.etcdctl(0, {"put", "/loopback/k", "v"});
    CHECK_THAT(etcd.etcdctl(0, {"get", "/loopback/k"}), Catch::Contains("/loopback/k\nv"));
    CHECK(etcd.leader() == 0);
  }
}

// ---- crun on etcd-v3 ------------------------------------------------------------------------

TEST_CASE("three hosts with an etcd member each run one job; MASTER_ADDR is node rank 0's", "[normal]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--print-env"});
  const auto ranks = formed(agents);
  std::string all;
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    CHECK_THAT(p->err(), !Catch::Contains("hosting"));  // no agent hosts anything
    CHECK(env_values(p->out(), "GROUP_RANK") == std::set<std::string>{std::to_string(ranks.at(h))});
    all += p->out();
  }
  CHECK(env_values(all, "RANK") == std::set<std::string>{"0", "1", "2"});
  CHECK(count(all, "MASTER_ADDR=" + Cluster::addr(host_of_rank(ranks, 0)) + "\n") == 3);
  CHECK(count(all, "GROUP_WORLD_SIZE=3\n") == 3);
  CHECK(count(all, " WORLD_SIZE=3\n") == 3);
  CHECK(count(all, "TORCHELASTIC_RUN_ID=job\n") == 3);
}

TEST_CASE("a worker failure on any host restarts every node; node rank 0 shows the root cause", "[failure]") {
  const int failing = GENERATE(1, 2, 3);
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  TempFile stamps;
  std::map<int, ChildProcess*> agents;
  for (int h = 1; h <= 3; ++h) {
    // The others' workers run until the restart, so the failure must stop them; the failing one
    // fails once the test has seen every worker of round 0 running.
    std::vector<std::string> args{"--stamp", stamps.path, "--hang", "--hang-before-restart", "1"};
    if (h == failing)
      args = {"--stamp", stamps.path, "--fail-on-signal", "SIGUSR1", "--fail-before-restart", "1",
              "--error-file", "bad batch", "--exit", "3"};
    agents[h] = &cl.crun(h, etcd_v3(etcd, "2:3", 1, 1), args);
  }
  const auto ranks = formed(agents);
  std::map<int, pid_t> worker;
  for (auto& [h, p] : agents) worker[h] = ready_pids(*p).front();
  ::kill(worker.at(failing), SIGUSR1);
  formed(agents, 1, 1);  // everyone restarted, in a round of three
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ", failing host " << failing << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
  }
  const std::string s = read_file(stamps.path);
  for (int r = 0; r < 3; ++r) CHECK(count(s, "start restart=1 rank=" + std::to_string(r) + " ") == 1);
  auto& zero = *agents.at(host_of_rank(ranks, 0));
  CHECK_THAT(zero.err(), Catch::Contains("exit code 3") && Catch::Contains("bad batch"));
  if (ranks.at(failing) != 0) CHECK_THAT(zero.err(), Catch::Contains("root cause reported by node"));
  CHECK_THAT(agents.at(failing)->err(), Catch::Contains("worker failed (root cause): rank " +
                                                        std::to_string(ranks.at(failing))));
}

TEST_CASE("SIGKILL of node rank 0's agent and its etcd member: the two others finish as a round of two",
          "[agent_killed]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  // Workers wait while the group has three ranks and finish in a group of two.
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--print-env", "--hang-unless-world", "2"});
  const auto ranks = formed(agents);
  for (auto& [h, p] : agents) ready_pids(*p);
  const int zero = host_of_rank(ranks, 0);
  agents.at(zero)->signal(SIGKILL);
  etcd.kill_member(zero);
  REQUIRE(agents.at(zero)->wait_exit() == 128 + SIGKILL);
  agents.erase(zero);
  const auto survivors = formed(agents, 1, 0);  // no restart spent (--max-restarts 0)
  std::string out;
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    out += p->out();
  }
  // Round 1's workers (round 0's named the dead host) point at the new node rank 0.
  CHECK(count(out, "MASTER_ADDR=" + Cluster::addr(host_of_rank(survivors, 0)) + "\n") == 2);
  CHECK(count(out, "GROUP_WORLD_SIZE=2\n") == 2);
}

TEST_CASE("a partitioned host exits as store lost; the others finish as a round of two", "[partition]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--print-env", "--hang-unless-world", "2"});
  const auto ranks = formed(agents);
  std::map<int, pid_t> worker;
  for (auto& [h, p] : agents) worker[h] = ready_pids(*p).front();
  // Node rank 0's host, with its etcd member: the member still answers there, without a quorum.
  const int cut = host_of_rank(ranks, 0);
  cl.link(cut, false);
  auto& lost = *agents.at(cut);
  {
    const auto ended = lost.wait_exit(40s);
    INFO("cut-off agent on host " << cut << ":\n" << lost.err() << "\n" << exit_text(ended));
    REQUIRE(ended == 7);
    CHECK_THAT(lost.err(), Catch::Contains("lost the rendezvous store"));
    CHECK(wait_pid_gone(worker.at(cut), 10s));
  }
  agents.erase(cut);
  formed(agents, 1, 0);
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
  }
}

TEST_CASE("a late joiner scales the job from two nodes to three without using a restart", "[scale_up]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  const auto flags = etcd_v3(etcd, "2:3", 1);
  const std::vector<std::string> worker{"--hang-unless-world", "3"};  // finishes once the group has three
  auto agents = agents_on(cl, {1, 2}, flags, worker);
  formed(agents);
  agents[3] = &cl.crun(3, flags, worker);
  formed(agents, 1, 0);
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    if (h != 3) CHECK_THAT(p->err(), Catch::Contains("scaling up"));
  }
}

TEST_CASE("one etcd member killed mid-job (the leader) changes nothing", "[etcd_member]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--trap", "SIGUSR1", "--hang"});
  formed(agents);
  std::vector<pid_t> workers;
  for (auto& [h, p] : agents) workers.push_back(ready_pids(*p).front());
  const int victim = etcd.leader();
  etcd.kill_member(victim);
  // Three of the agents' lease lifetimes pass on etcd's own clock: a lease left unrenewed would
  // have expired, and a new round would have begun.
  etcd.outlive_lease(victim == 1 ? 2 : 1, 6);
  for (auto& [h, p] : agents) {
    INFO("agent on host " << h << ":\n" << p->err());
    CHECK_THAT(p->err(), !Catch::Contains("round 1"));
    CHECK_FALSE(p->wait_exit(0ms).has_value());
  }
  for (pid_t pid : workers) ::kill(pid, SIGUSR1);  // each worker exits 0
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    CHECK_THAT(p->err(), !Catch::Contains("round 1"));
  }
}

TEST_CASE("every etcd member gone: every agent exits as store lost, naming the endpoints, no process left",
          "[store_lost]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--hang"});
  formed(agents);
  std::vector<pid_t> workers;
  for (auto& [h, p] : agents) workers.push_back(ready_pids(*p).front());
  etcd.kill_all();
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit(60s);
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 7);
    bool named = false;  // one line names every endpoint tried
    for (const auto& line : lines(p->err()))
      named = named || (line.find("10.77.0.1:2379") != std::string::npos && line.find("10.77.0.2:2379") != std::string::npos &&
                        line.find("10.77.0.3:2379") != std::string::npos);
    CHECK(named);
  }
  for (pid_t pid : workers) CHECK(wait_pid_gone(pid, 10s));
  for (int h = 1; h <= 3; ++h) {  // nothing at all runs on the hosts any more
    ChildProcess pids({CRUN_IP_BIN, "netns", "pids", cl.netns(h)});
    REQUIRE(pids.wait_exit(10s) == 0);
    INFO("still running on host " << h << ": " << pids.out());
    CHECK(pids.out().empty());
  }
}

TEST_CASE("over https with client certificates the job runs", "[tls]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3}, EtcdCluster::Tls::on);
  auto agents = agents_on(cl, {1, 2, 3}, etcd_v3(etcd, "2:3", 1), {"--print-env", "--agent-libraries"});
  formed(agents);
  std::string all;
  for (auto& [h, p] : agents) {
    const auto ended = p->wait_exit();
    INFO("agent on host " << h << ":\n" << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    all += p->out();
    CHECK(p->out().find("libssl.so.3") != std::string::npos);  // opened for TLS (rendezvous/tls_library.h)
  }
  CHECK(env_values(all, "RANK") == std::set<std::string>{"0", "1", "2"});
}

TEST_CASE("a wrong CA, or no client certificate, is rejected in one line before any worker starts", "[tls]") {
  Cluster cl(2);
  EtcdCluster etcd(cl, {1}, EtcdCluster::Tls::on);
  const auto& tls = etcd.tls();
  const std::string wrong_ca = kTimeouts + ",protocol=https,cacert=" + tls.other_ca + ",cert=" + tls.cert + ",key=" + tls.key;
  const std::string no_cert = kTimeouts + ",protocol=https,cacert=" + tls.ca;
  for (const auto& conf : {wrong_ca, no_cert}) {
    auto& p = cl.crun(2, etcd_v3(etcd, "1:2", 1, 0, conf), {"--print-env"});
    const auto ended = p.wait_exit(30s);
    INFO("--rdzv-conf " << conf << "\nagent's stderr:\n" << p.err() << "\n" << exit_text(ended));
    REQUIRE(ended == 6);
    CHECK(one_tls_line(p.err(), "10.77.0.1:2379"));
    CHECK(p.out().empty());  // no worker ran
  }
}

TEST_CASE("PyTorch DDP over gloo on two hosts with an etcd-v3 rendezvous matches a one-host run", "[pytorch_ddp]") {
  const std::string python = "/usr/bin/python3";
  const std::string train = CRUN_PYTORCH_DIR "/train.py";
  auto results = [](const std::string& out) {
    std::vector<std::string> r;
    for (const auto& line : lines(out))
      if (line.rfind("RESULT ", 0) == 0) r.push_back(line);
    std::sort(r.begin(), r.end());
    return r;
  };
  std::vector<std::string> reference;
  {
    ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "2", python, train}, {"GLOO_SOCKET_IFNAME=lo"});
    const auto code = p.wait_exit(120s);
    INFO("the one-host reference (needs python3-torch: scripts/install-deps.sh):\n" << p.out() << p.err());
    REQUIRE(code == 0);
    reference = results(p.out());
    REQUIRE(reference.size() >= 8);  // sampler, start and final per rank, the epochs' losses
  }
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  std::string out;
  std::vector<ChildProcess*> agents;
  for (int h = 1; h <= 2; ++h)
    agents.push_back(&cl.crun_program(h, etcd_v3(etcd, "2", 1), python, {train}, {"GLOO_SOCKET_IFNAME=eth0"}));
  for (auto* p : agents) {
    const auto ended = p->wait_exit(120s);
    INFO(p->out() << p->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    out += p->out();
  }
  CHECK(results(out) == reference);  // the same losses and bit-identical weights
}

TEST_CASE("train_mlp resumes bit-identically across two hosts on an etcd-v3 rendezvous", "[train_mlp]") {
  std::string reference;
  {
    ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "2", CRUN_TRAIN_MLP});
    REQUIRE(p.wait_exit(120s) == 0);
    reference = sha(p.out());
    REQUIRE(reference.size() == 64);
  }
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  char dir[] = "/tmp/crun-etcd-ckpt-XXXXXX";  // one checkpoint directory, as a shared file system would give
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::vector<std::string> train{"--checkpoint-dir", dir, "--fail-at-step", "120", "--fail-rank", "1"};
  auto& a = cl.crun_program(1, etcd_v3(etcd, "2", 1, 1), CRUN_TRAIN_MLP, train);
  auto& b = cl.crun_program(2, etcd_v3(etcd, "2", 1, 1), CRUN_TRAIN_MLP, train);
  const auto ca = a.wait_exit(180s), cb = b.wait_exit(180s);
  const std::string err = a.err() + b.err(), out = a.out() + b.out();
  std::string cleanup = std::string("rm -rf ") + dir;
  int ignored = std::system(cleanup.c_str());
  (void)ignored;
  INFO(err);
  REQUIRE(ca == 0);
  REQUIRE(cb == 0);
  CHECK_THAT(err, Catch::Contains("root cause reported by node"));  // rank 1 failed on node rank 1
  CHECK_THAT(out, Catch::Contains("resumed from checkpoint"));
  CHECK(sha(out) == reference);
}

TEST_CASE("node rank 0's endpoint shows every node of an etcd-v3 job, read from etcd", "[ops]") {
  Cluster cl(2);
  EtcdCluster etcd(cl, {1, 2});
  auto flags = etcd_v3(etcd, "2", 2);
  flags.insert(flags.end(), {"--health-check-port", "8080", "--health-check-addr", "0.0.0.0"});
  auto agents = agents_on(cl, {1, 2}, flags, {"--hang"});
  const auto ranks = formed(agents);
  const int host0 = host_of_rank(ranks, 0);
  const int other = 3 - host0;
  const std::string url = "http://" + Cluster::addr(host0) + ":8080";
  // Node rank 0 reads the others' records at its lease's keep-alives: poll it, bounded.
  nlohmann::json doc;
  const auto deadline = std::chrono::steady_clock::now() + 40s;
  while (std::chrono::steady_clock::now() < deadline) {
    doc = nlohmann::json::parse(cl.run(other, {CRUN_BIN, "status", url, "--json"}), nullptr, false);
    if (!doc.is_discarded() && doc["job"]["workers_running"] == 4) break;
    std::this_thread::sleep_for(200ms);  // the poll's interval, bounded by the deadline
  }
  INFO(doc.dump(2));
  REQUIRE(doc["job"]["workers_running"] == 4);
  CHECK(doc["job"]["nodes_seen"] == 2);
  std::set<std::string> addrs;
  for (const auto& n : doc["job"]["nodes"]) addrs.insert(n["addr"].get<std::string>());
  CHECK(addrs == std::set<std::string>{Cluster::addr(1), Cluster::addr(2)});
  // The records live under the nodes' leases, beside the run's keys.
  CHECK_THAT(etcd.etcdctl(host0, {"get", "--prefix", "--keys-only", "/crun/job/status/"}), Catch::Contains("/status/"));
  for (auto& [h, p] : agents) p->signal(SIGTERM);
  for (auto& [h, p] : agents) CHECK(p->wait_exit(60s).has_value());
}

// The closing job's stacks over etcd-v3 (tests/support/closing_stacks_job.h, as tests/multinode's
// c10d case): node 1's capture ends long after node rank 0's workers are gone, and its agent leaves
// (its lease revoked) before node rank 0 reads its record, which lives under a lease of its own.
TEST_CASE("etcd-v3: the job closes: node rank 0 waits for the other node's stacks and names the odd rank",
          "[closing_stacks]") {
  const int failing_rank = GENERATE(0, 4);
  Cluster cl(2);
  EtcdCluster etcd(cl, {1, 2});
  const ClosingStacksJob job;
  std::map<int, ChildProcess*> agents;
  for (int h : {1, 2}) {
    auto flags = etcd_v3(etcd, "2", 4);
    const auto more = job.flags("h" + std::to_string(h));
    flags.insert(flags.end(), more.begin(), more.end());
    agents[h] = &cl.crun_program(h, flags, job.script(), {}, job.env());
  }
  const auto ranks = formed(agents);
  const int host0 = host_of_rank(ranks, 0), host1 = 3 - host0;
  job.check(*agents[host0], "h" + std::to_string(host0), *agents[host1], "h" + std::to_string(host1), failing_rank);
  // Node 1's record outlived its agent: round 0's, by node rank.
  CHECK_THAT(etcd.etcdctl(host0, {"get", "--prefix", "--keys-only", "/crun/job/stacks/"}), Catch::Contains("/crun/job/stacks/0/1"));
}

// The bound over etcd-v3 (ClosingStacksJob::check_bound): node 1's agent is stopped, so it writes no
// stacks; node rank 0's watch of the round's stacks keys ends at the bound, node 1 named.
TEST_CASE("etcd-v3: the job closes: a node that sends no stacks holds node rank 0 no longer than the bound",
          "[closing_stacks]") {
  Cluster cl(2);
  EtcdCluster etcd(cl, {1, 2});
  const ClosingStacksJob job;
  std::map<int, ChildProcess*> agents;
  for (int h : {1, 2}) {
    auto flags = etcd_v3(etcd, "2", 2);
    const auto more = job.flags("h" + std::to_string(h), "2");
    flags.insert(flags.end(), more.begin(), more.end());
    agents[h] = &cl.crun(h, flags, ClosingStacksJob::bound_worker_args());
  }
  const auto ranks = formed(agents);
  const int host0 = host_of_rank(ranks, 0);
  job.check_bound(*agents[host0], "h" + std::to_string(host0), *agents[3 - host0]);
}

TEST_CASE("state that outlives a node over etcd-v3: node 0's agent SIGKILLed, its ranks resume on the others from the replica",
          "[state_replica]") {
  constexpr long kSteps = 1000;
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2, 3});
  char dir[] = "/tmp/crun-etcd-state-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  // Host 2 is node 0 (killed), host 1 node 1, host 3 node 2: afterwards host 1 runs ranks 0 and 1
  // (its replicas of host 2's), host 3 ranks 2 and 3 (host 1's own, fetched over the network).
  const int hint[] = {1, 0, 2};
  std::map<int, ChildProcess*> agents;
  for (int h = 1; h <= 3; ++h) {
    auto flags = etcd_v3(etcd, "2:3", 2);
    flags.insert(flags.end(), {"--node-rank", std::to_string(hint[h - 1])});
    agents[h] = &cl.crun_program(h, flags, CRUN_STATE_WORKER,
                                 {"--steps", std::to_string(kSteps), "--step-ms", "10", "--state-bytes", "65536", "--out", dir});
  }
  for (int h = 1; h <= 3; ++h) REQUIRE(node_rank(*agents[h], 0, 3) == hint[h - 1]);
  auto progress = [&](int rank) {
    const std::string t = read_file(std::string(dir) + "/progress-" + std::to_string(rank));
    return t.empty() ? 0L : std::atol(t.c_str());
  };
  REQUIRE(eventually([&] {
    for (int r = 0; r < 6; ++r) if (progress(r) < 40) return false;
    return true;
  }, 60s));
  agents[2]->signal(SIGKILL);
  REQUIRE(agents[2]->wait_exit() == 128 + SIGKILL);
  std::string finals;
  for (int h : {1, 3}) {
    const auto ended = agents[h]->wait_exit(120s);
    INFO("agent on host " << h << ":\n" << agents[h]->err() << "\n" << exit_text(ended));
    REQUIRE(ended == 0);
    finals += agents[h]->out();
  }
  CHECK_THAT(agents[1]->err(), Catch::Contains("rank 0 from this node's replicas; rank 1 from this node's replicas"));
  CHECK_THAT(agents[3]->err(), Catch::Contains("rank 2 from " + Cluster::addr(1) + ":"));
  for (int r = 0; r < 4; ++r) {
    char want[96];
    std::snprintf(want, sizeof want, "final rank=%d digest=%016llx", r,
                  static_cast<unsigned long long>(crun::test::state_digest(r, kSteps)));
    CHECK_THAT(finals, Catch::Contains(want));
  }
  std::string cleanup = std::string("rm -rf ") + dir;
  int ignored = std::system(cleanup.c_str());
  (void)ignored;
}

// ---- exclusion and hot spares -------------------------------------------------------------------

// As tests/multinode's: hosts 1 and 2 run a 2:2 job, host 3 waits as a spare; host 2's worker fails
// twice: host 2 is written into the round record's excluded set, the spare takes its node rank;
// after the 3 s cooldown host 2 asks again and waits until host 3 is lost (its lease expires), then
// takes its rank back without a restart.
TEST_CASE("etcd-v3: a host that is the root cause twice is excluded; the spare takes its node rank; it comes back",
          "[exclusion]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1});
  ExclusionJob job;
  auto flags = etcd_v3(etcd, "2:2", 1, 5);
  flags.insert(flags.end(), {"--exclude-cooldown", "3", "--health-check-port", "8080", "--health-check-addr", "0.0.0.0"});
  auto& a = cl.crun_program(1, flags, "/bin/sh", {job.script()}, job.env(1, false));
  auto& b = cl.crun_program(2, flags, "/bin/sh", {job.script()}, job.env(2, true));
  const int b_rank = node_rank_of(b, 0, 2, 0);
  REQUIRE(b_rank >= 0);
  REQUIRE(node_rank_of(a, 0, 2, 0) == 1 - b_rank);
  auto& spare = cl.crun_program(3, flags, "/bin/sh", {job.script()}, job.env(3, false));
  REQUIRE(err_has(spare, "round 0 is full (2 nodes); waiting for the next one"));
  ExclusionJob::touch(job.go);
  CHECK(node_rank_of(b, 1, 2, 1) == b_rank);
  REQUIRE(err_has(a, "excluded for 3 s (exclusion 1): the root cause 2 times"));
  CHECK(node_rank_of(spare, 2, 2, 2) == b_rank);
  REQUIRE(node_rank_of(a, 2, 2, 2) == 1 - b_rank);
  REQUIRE(err_has(b, "is excluded until"));
  // Node rank 0 shows the excluded host, from the round record.
  const std::string table = cl.run(1, {CRUN_BIN, "status", "http://" + Cluster::addr(b_rank == 0 ? 3 : 1) + ":8080"});
  INFO(table);
  CHECK_THAT(table, Catch::Contains("excluded nodes (1 exclusion(s) so far):") && Catch::Contains(Cluster::addr(2)) &&
                        Catch::Contains("the root cause 2 times"));
  // The round record holds the excluded set: who, why, until when, how many times.
  const std::string record = etcd.etcdctl(1, {"get", "--print-value-only", "/crun/job/round"});
  INFO(record);
  CHECK_THAT(record, Catch::Contains("\"excluded\"") && Catch::Contains("the root cause 2 times") &&
                         Catch::Contains("\"times\":1") && Catch::Contains("until_unix_ms"));
  REQUIRE(err_has(b, "this node's exclusion ended: asking for a round again"));
  REQUIRE(err_has(b, "is full (2 nodes); waiting for the next one"));
  spare.signal(SIGKILL);  // its lease expires within about 3 s
  CHECK(node_rank_of(b, 3, 2, 2) == b_rank);
  ExclusionJob::touch(job.done);
  CHECK(a.wait_exit() == 0);
  CHECK(b.wait_exit() == 0);
  CHECK(count(read_file(job.fails), "failed") == 2);
  const std::string stamps = read_file(job.stamps);
  INFO(stamps);
  CHECK(count(stamps, "start host=3 group_rank=" + std::to_string(b_rank) + " restart=2") == 1);
  CHECK(count(stamps, "start host=2 group_rank=" + std::to_string(b_rank) + " restart=2") == 1);
}

TEST_CASE("etcd-v3: a worker's stop-job closes the job on every node with its exit code", "[worker_request]") {
  Cluster cl(2);
  EtcdCluster etcd(cl, {1});
  RequestJob job;
  const auto flags = etcd_v3(etcd, "2", 1, 3);
  auto& a = cl.crun_program(1, flags, "/bin/sh", {job.request_script()}, job.env(1));
  auto& b = cl.crun_program(2, flags, "/bin/sh", {job.request_script()}, job.env(2, "stop-job data corrupt in shard 7", 7));
  REQUIRE(node_rank_of(a, 0, 2, 0) >= 0);
  REQUIRE(node_rank_of(b, 0, 2, 0) >= 0);
  ExclusionJob::touch(job.go);
  CHECK(b.wait_exit() == 7);
  CHECK(a.wait_exit() == 7);
  INFO(a.err() << b.err());
  CHECK(count(b.err(), "asks crun to stop the job (stop-job): data corrupt in shard 7") == 1);
  CHECK_THAT(a.err(), Catch::Contains("asked to stop the job (exit code 7): data corrupt in shard 7"));
  CHECK(count(read_file(job.stamps), "restart=1") == 0);
}

TEST_CASE("etcd-v3: a worker's exclude-node leaves its host out of the next round; the spare takes its rank",
          "[worker_request]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1});
  RequestJob job;
  const auto flags = etcd_v3(etcd, "2:2", 1, 5);
  auto& a = cl.crun_program(1, flags, "/bin/sh", {job.request_script()}, job.env(1));
  auto& b = cl.crun_program(2, flags, "/bin/sh", {job.request_script()}, job.env(2, "exclude-node GPU 0 reports XID 79", 0));
  const int b_rank = node_rank_of(b, 0, 2, 0);
  REQUIRE(b_rank >= 0);
  REQUIRE(node_rank_of(a, 0, 2, 0) == 1 - b_rank);
  auto& spare = cl.crun_program(3, flags, "/bin/sh", {job.request_script()}, job.env(3));
  REQUIRE(err_has(spare, "round 0 is full (2 nodes); waiting for the next one"));
  ExclusionJob::touch(job.go);
  CHECK(node_rank_of(spare, 1, 2, 1) == b_rank);
  CHECK(node_rank_of(a, 1, 2, 1) == 1 - b_rank);
  INFO(a.err() << b.err());
  CHECK(count(b.err(), "asks crun to exclude this node (exclude-node): GPU 0 reports XID 79") == 1);
  CHECK_THAT(a.err(), Catch::Contains("a worker asked to exclude it: GPU 0 reports XID 79"));
  REQUIRE(err_has(b, "is excluded until"));
  ExclusionJob::touch(job.done);
  CHECK(a.wait_exit() == 0);
  CHECK(spare.wait_exit() == 0);
  CHECK(b.wait_exit().has_value());
  const std::string stamps = read_file(job.stamps);
  INFO(stamps);
  CHECK(count(stamps, "start host=3 group_rank=" + std::to_string(b_rank) + " restart=1") == 1);
  CHECK(count(stamps, "host=2") == 0);
}

TEST_CASE("etcd-v3: a host whose node check fails never gets a rank; node rank 0 shows why; the job runs on the others",
          "[node_check]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1, 2});
  auto flags = etcd_v3(etcd, "2:2", 1);
  flags.insert(flags.end(), {"--health-check-port", "8080", "--health-check-addr", "0.0.0.0"});
  TempFile go;  // the healthy hosts' workers finish once the test has seen node rank 0's view
  ::unlink(go.path.c_str());
  const std::string wait_go = "while [ ! -e " + go.path + " ]; do sleep 0.05; done; echo finished";
  auto bad_flags = flags;
  bad_flags.insert(bad_flags.end(), {"--node-check", "sh -c 'echo NIC ib0 down >&2; exit 1'", "--node-check-interval", "0.5"});
  auto& bad = cl.crun_program(3, bad_flags, "sh", {"-c", wait_go});
  REQUIRE(err_has(bad, "exit code 1: NIC ib0 down; not joining, next try in 0.5 s\n"));
  std::map<int, ChildProcess*> agents{{1, &cl.crun_program(1, flags, "sh", {"-c", wait_go})},
                                      {2, &cl.crun_program(2, flags, "sh", {"-c", wait_go})}};
  const auto ranks = formed(agents);
  const std::string url = "http://" + Cluster::addr(host_of_rank(ranks, 0)) + ":8080";
  nlohmann::json doc;
  nlohmann::json outside;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  // Both the healthy other node's record and the bad one's.
  while ((outside.is_null() || doc["job"]["nodes_seen"] != 2) && std::chrono::steady_clock::now() < deadline) {
    outside = nullptr;
    doc = nlohmann::json::parse(cl.run(3, {CRUN_BIN, "status", url, "--json"}), nullptr, false);
    REQUIRE_FALSE(doc.is_discarded());
    for (const auto& n : doc["job"]["nodes"]) {
      if (n["node_rank"] == -1) outside = n;
    }
    if (outside.is_null() || doc["job"]["nodes_seen"] != 2) std::this_thread::sleep_for(200ms);  // the poll's interval, bounded by the deadline
  }
  INFO(doc.dump(2));
  REQUIRE_FALSE(outside.is_null());
  CHECK(outside["state"] == "unhealthy");
  CHECK(outside["node_check"] == "sh -c 'echo NIC ib0 down >&2; exit 1': exit code 1: NIC ib0 down");
  CHECK(doc["job"]["nodes_seen"] == 2);
  std::ofstream(go.path) << "go\n";
  for (auto& [h, p] : agents) CHECK(p->wait_exit(60s) == 0);
  CHECK(count(agents[1]->out() + agents[2]->out(), "finished") == 2);
  CHECK(bad.err().find("node rank") == std::string::npos);
  bad.signal(SIGTERM);
  CHECK(bad.wait_exit(60s).has_value());
}

// --precheck over etcd-v3, as tests/multinode's slowed-host case: host 2's agent, and so its
// precheck, pinned to CPU 1 beside the busy loops (tests/support/pinned_agent.h), hosts 1 and 3
// to CPU 0. Host 2 is reported slow and asks to be excluded; the spare (host 3) takes its node
// rank and the job finishes. CRUN_PRECHECK_REPEAT makes the compute part long enough for the
// spare to be waiting before the slow host's request arrives.
TEST_CASE("etcd-v3: --precheck reports a slowed host slow and keeps it out; the spare takes its node rank", "[precheck]") {
  Cluster cl(3);
  EtcdCluster etcd(cl, {1});
  ExclusionJob job;
  auto busy = busy_loops_on_cpu1();
  auto flags = etcd_v3(etcd, "2:2", 1, 5);
  flags.insert(flags.end(), {"--precheck", "--precheck-slowdown", "1.5"});
  auto env = [&](int host) {
    auto e = job.env(host, false);
    e.push_back("CRUN_PRECHECK_REPEAT=120");
    return e;
  };
  auto& a = crun_pinned(cl, 1, 0, flags, job.script(), env(1));
  auto& b = crun_pinned(cl, 2, 1, flags, job.script(), env(2));
  const int b_rank = node_rank_of(b, 0, 2, 0);
  REQUIRE(b_rank >= 0);
  REQUIRE(node_rank_of(a, 0, 2, 0) == 1 - b_rank);
  auto& spare = crun_pinned(cl, 3, 0, flags, job.script(), env(3));
  REQUIRE(err_has(spare, "round 0 is full (2 nodes); waiting for the next one"));
  const std::string slow = "slow node rank " + std::to_string(b_rank);
  REQUIRE(err_has(b, slow + " (this node: it asks to be excluded)"));
  REQUIRE(err_has(a, slow + "; waiting for the next round"));
  CHECK(node_rank_of(spare, 1, 2, 1) == b_rank);
  REQUIRE(node_rank_of(a, 1, 2, 1) == 1 - b_rank);
  for (auto& p : busy) p->signal(SIGKILL);
  CHECK_THAT(a.err(), Catch::Contains("a worker asked to exclude it: precheck: "));
  REQUIRE(eventually([&] { return count(read_file(job.stamps), "start host=") == 2; }, std::chrono::seconds(20)));
  ExclusionJob::touch(job.done);
  CHECK(a.wait_exit() == 0);
  CHECK(spare.wait_exit() == 0);
  CHECK(b.wait_exit().has_value());
  const std::string stamps = read_file(job.stamps);
  INFO(stamps << a.err() << b.err());
  CHECK(count(stamps, "start host=3 group_rank=" + std::to_string(b_rank) + " restart=1") == 1);
  CHECK(count(stamps, "host=2") == 0);
}
