#include "tests/support/etcd_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "tests/support/cluster.h"

namespace crun::test {

namespace {

constexpr int kClientPort = 2379;
constexpr int kPeerPort = 2380;

// A port nothing on 127.0.0.1 listens on now (the kernel's pick for a bind to port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(a.sin_port);
}

void require_tool(const std::string& path) {
  INFO(path << " is missing: scripts/install-deps.sh installs etcd-server, etcd-client and openssl");
  REQUIRE(::access(path.c_str(), X_OK) == 0);
}

// etcd fsyncs its log on every write: on a busy disk a stall there misses raft heartbeats and
// lease renewals that the tests time in seconds, so the data lives in memory when it can.
std::string temp_dir() {
  std::string pattern = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm/crun-etcd-XXXXXX" : "/tmp/crun-etcd-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

std::string run_local(const std::vector<std::string>& argv) {
  ChildProcess p(argv);
  const auto code = p.wait_exit(60s);
  INFO(argv.front() << ":\n" << p.out() << p.err());
  REQUIRE(code == 0);
  return p.out() + p.err();
}

std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, start)) {
    parts.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

}  // namespace

EtcdCluster::EtcdCluster(Cluster& cluster, const std::vector<int>& hosts, Tls tls) : cluster_(&cluster) {
  REQUIRE(!hosts.empty());
  std::vector<std::string> addrs;
  std::string initial;
  for (int h : hosts) {
    Member& m = members_[h];
    m.addr = Cluster::addr(h);
    m.client_port = kClientPort;
    m.peer_port = kPeerPort;
    addrs.push_back(m.addr);
    initial += (initial.empty() ? "h" : ",h") + std::to_string(h) + "=http://" + m.addr + ":" + std::to_string(kPeerPort);
  }
  make_dir(tls, addrs);
  for (auto it = members_.begin(); it != members_.end(); ++it) start(it, initial);
  wait_serving();
}

EtcdCluster::EtcdCluster(Loopback, Tls tls) {
  Member& m = members_[0];
  m.addr = "127.0.0.1";
  m.client_port = free_port();
  do {
    m.peer_port = free_port();
  } while (m.peer_port == m.client_port);
  make_dir(tls, {m.addr});
  start(members_.begin(), "h0=http://127.0.0.1:" + std::to_string(m.peer_port));
  wait_serving();
}

EtcdCluster::~EtcdCluster() {
  for (auto& [host, m] : members_) {
    if (m.running) m.process->signal(SIGKILL);
    m.process.reset();  // reaps it: ChildProcess's reader ends with the process
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::vector<std::string> EtcdCluster::on_host(int host, std::vector<std::string> argv) const {
  if (cluster_ == nullptr) return argv;
  std::vector<std::string> full{CRUN_IP_BIN, "netns", "exec", cluster_->netns(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

std::string EtcdCluster::url(const Member& m) const {
  return (tls_on_ ? "https://" : "http://") + m.addr + ":" + std::to_string(m.client_port);
}

void EtcdCluster::make_dir(Tls tls, const std::vector<std::string>& addrs) {
  require_tool(CRUN_ETCD_BIN);
  require_tool(CRUN_ETCDCTL_BIN);
  dir_ = temp_dir();
  tls_on_ = tls == Tls::on;
  if (!tls_on_) return;
  require_tool(CRUN_OPENSSL_BIN);
  const std::string d = dir_ + "/tls";
  std::filesystem::create_directory(d);
  std::vector<std::string> argv{CRUN_ETCD_CERTS_SCRIPT, d};
  argv.insert(argv.end(), addrs.begin(), addrs.end());
  run_local(argv);
  tls_ = EtcdTlsFiles{d + "/ca.pem", d + "/client.pem", d + "/client.key", d + "/other-ca.pem"};
}

void EtcdCluster::start(const std::map<int, Member>::iterator& at, const std::string& initial_cluster) {
  const std::string name = "h" + std::to_string(at->first);
  Member& m = at->second;
  const std::string peer = "http://" + m.addr + ":" + std::to_string(m.peer_port);
  std::vector<std::string> argv{CRUN_ETCD_BIN, "--logger", "zap", "--name", name, "--data-dir", dir_ + "/" + name,
                                "--listen-client-urls", url(m), "--advertise-client-urls", url(m),
                                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
                                "--initial-cluster-token", std::filesystem::path(dir_).filename().string()};
  if (tls_on_) {
    const std::string d = dir_ + "/tls/";
    argv.insert(argv.end(), {"--cert-file", d + "server.pem", "--key-file", d + "server.key", "--trusted-ca-file",
                             d + "ca.pem", "--client-cert-auth"});
  }
  m.process = std::make_unique<ChildProcess>(on_host(at->first, argv));
  m.running = true;
}

// etcd logs "serving client traffic ..." once the member has joined the cluster through raft
// (it waits for that before serving), so every member saying it means the cluster has a quorum.
void EtcdCluster::wait_serving() {
  for (auto& [host, m] : members_) {
    const bool serving = m.process->wait_until(
        [](const std::string&, const std::string& err) { return err.find("serving client traffic") != std::string::npos; },
        30s);
    INFO("etcd member on host " << host << " (" << url(m) << ") is not serving after 30 s; its log:\n"
                                << m.process->err());
    REQUIRE(serving);
  }
}

EtcdCluster::Member& EtcdCluster::member(int host) {
  auto it = members_.find(host);
  REQUIRE(it != members_.end());
  return it->second;
}

const EtcdCluster::Member& EtcdCluster::member(int host) const {
  auto it = members_.find(host);
  REQUIRE(it != members_.end());
  return it->second;
}

std::string EtcdCluster::endpoint(int host) const {
  const Member& m = member(host);
  return m.addr + ":" + std::to_string(m.client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string all;
  for (const auto& [host, m] : members_) all += (all.empty() ? "" : ",") + endpoint(host);
  return all;
}

std::string EtcdCluster::tls_conf() const {
  if (!tls_on_) return "";
  return "protocol=https,cacert=" + tls_.ca + ",cert=" + tls_.cert + ",key=" + tls_.key;
}

const EtcdTlsFiles& EtcdCluster::tls() const {
  REQUIRE(tls_on_);
  return tls_;
}

void EtcdCluster::kill_member(int host) {
  Member& m = member(host);
  REQUIRE(m.running);
  int left = 0;
  for (const auto& [h, other] : members_) left += other.running && h != host ? 1 : 0;
  const bool quorum_left = 2 * left > static_cast<int>(members_.size());
  // Killing the leader: the others elect a new one, each saying "elected leader" once more.
  const bool was_leader = quorum_left && leader() == host;
  std::map<int, int> elections;
  for (const auto& [h, other] : members_) elections[h] = other.running ? count(other.process->err(), "elected leader") : 0;
  m.process->signal(SIGKILL);
  REQUIRE(m.process->wait_exit(10s) == 128 + SIGKILL);
  m.running = false;
  if (!was_leader) return;
  for (auto& [h, other] : members_) {
    if (!other.running) continue;
    const bool elected = other.process->wait_until(
        [&, h = h](const std::string&, const std::string& err) { return count(err, "elected leader") > elections[h]; },
        30s);
    INFO("etcd member on host " << h << " saw no new leader 30 s after the leader's death; its log:\n"
                                << other.process->err());
    REQUIRE(elected);
  }
}

void EtcdCluster::kill_all() {
  for (auto& [host, m] : members_) {
    if (m.running) kill_member(host);
  }
}

std::string EtcdCluster::log(int host) const { return member(host).process->err(); }

std::vector<std::string> EtcdCluster::etcdctl_argv(const std::string& endpoints,
                                                   const std::vector<std::string>& args) const {
  std::vector<std::string> argv{CRUN_ETCDCTL_BIN, "--endpoints", endpoints, "--dial-timeout", "5s",
                                "--command-timeout", "10s"};
  if (tls_on_) argv.insert(argv.end(), {"--cacert", tls_.ca, "--cert", tls_.cert, "--key", tls_.key});
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::string EtcdCluster::etcdctl(int host, const std::vector<std::string>& args) {
  return run_local(on_host(host, etcdctl_argv(url(member(host)), args)));
}

int EtcdCluster::leader() {
  std::string urls;
  int on = -1;
  for (const auto& [host, m] : members_) {
    if (!m.running) continue;
    urls += (urls.empty() ? "" : ",") + url(m);
    on = host;
  }
  REQUIRE(on >= 0);
  // -w simple: "URL, ID, VERSION, DB SIZE, IS LEADER, IS LEARNER, RAFT TERM, ..."
  const std::string status = run_local(on_host(on, etcdctl_argv(urls, {"endpoint", "status", "-w", "simple"})));
  for (const auto& line : lines(status)) {
    const auto f = split(line, ", ");
    if (f.size() < 5 || f[4] != "true") continue;
    for (const auto& [host, m] : members_) {
      if (url(m) == f[0]) return host;
    }
  }
  INFO("etcdctl endpoint status:\n" << status);
  FAIL("no member leads");
  return -1;
}

void EtcdCluster::outlive_lease(int host, int ttl_s) {
  // "lease 694d7f4a1b2c3d4e granted with TTL(3s)"
  const std::string grant = etcdctl(host, {"lease", "grant", std::to_string(ttl_s)});
  std::smatch id;
  INFO(grant);
  REQUIRE(std::regex_search(grant, id, std::regex("lease ([0-9a-f]+) granted")));
  const std::string key = "/crun-test/outlive-" + std::to_string(++leases_);
  const std::string put = etcdctl(host, {"put", key, "x", "--lease=" + id[1].str(), "-w", "json"});
  std::smatch rev;
  INFO(put);
  REQUIRE(std::regex_search(put, rev, std::regex("\"revision\":([0-9]+)")));
  // Watching from the put's revision sees the put, then the deletion, however late the watch starts.
  ChildProcess watch(on_host(host, etcdctl_argv(url(member(host)), {"watch", key, "--rev", rev[1].str()})));
  const bool expired = watch.wait_for_stdout("DELETE", 1, std::chrono::seconds(ttl_s + 20));
  INFO("etcdctl watch " << key << ":\n" << watch.out() << watch.err());
  REQUIRE(expired);
}

}  // namespace crun::test
