// EtcdCluster: a real etcd (Debian's etcd-server, v3 API) for the etcd-v3 rendezvous tests and
// benches: one member on each given host of a Cluster (10.77.0.K, client port 2379, peer port 2380),
// or one member on 127.0.0.1 at free ports, in the caller's own network namespace (Loopback).
//
// Contract
//   - The constructor starts every member and returns once each says it serves clients (bound 30 s;
//     a REQUIRE naming the member and showing its log fails otherwise). Data directories (and the
//     TLS files) live under a fresh temporary directory.
//   - The members are processes of the EtcdCluster (ChildProcess, started through `ip netns exec`
//     on their host): the destructor SIGKILLs those still running, waits for them, and removes the
//     temporary directory. It may run before or after the Cluster's (whose teardown kills
//     everything left in its namespaces).
//   - With Tls::on every member serves https only and requires a client certificate signed by the
//     test CA; peers talk plain http. tests/support/etcd-certs.sh writes the CA, one server
//     certificate for every member's address, a client certificate and an unrelated CA (openssl).
//   - kill_member() SIGKILLs one member and waits until it is gone; when it led and a majority is
//     left, it also waits (bound 30 s) until the others have elected a new leader, so that they
//     serve at once. kill_all() waits for nothing more than the deaths.
//   - etcdctl() runs etcdctl on a member's host against that member (with the TLS flags);
//     REQUIRE: exit 0. outlive_lease() waits on etcd's own clock (a lease's expiry), not ours.
//   - A member is named by its host number (0 for the loopback member).
//
// Threading
//   Use from the test's thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/child_process.h"

namespace crun::test {

class Cluster;

// The files etcd-certs.sh writes (absolute paths).
struct EtcdTlsFiles {
  std::string ca, cert, key;  // the test CA; the client certificate and its key
  std::string other_ca;       // a CA that signed nothing here
};

class EtcdCluster {
 public:
  enum class Tls { off, on };
  struct Loopback {};

  EtcdCluster(Cluster& cluster, const std::vector<int>& hosts, Tls tls = Tls::off);
  explicit EtcdCluster(Loopback, Tls tls = Tls::off);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "ADDR:PORT" of one member, and of all of them comma-separated in host order (--rdzv-endpoint).
  std::string endpoint(int host) const;
  std::string endpoints() const;
  // --rdzv-conf entries that make crun use the TLS files: "protocol=https,cacert=...,cert=...,key=..."
  // ("" with Tls::off).
  std::string tls_conf() const;
  const EtcdTlsFiles& tls() const;  // REQUIRE: Tls::on

  void kill_member(int host);
  void kill_all();
  // The member's own log (its stderr so far).
  std::string log(int host) const;

  // etcdctl ARGS on `host` against its member; returns stdout and stderr. REQUIRE: exit 0.
  std::string etcdctl(int host, const std::vector<std::string>& args);
  // The host of the member that leads now (etcdctl endpoint status over the running members).
  int leader();
  // Grants a lease of `ttl_s` seconds through `host`'s member, attaches a key to it, and waits
  // (bound: ttl_s + 20 s) until etcd deletes that key: at least ttl_s seconds passed while the
  // cluster kept serving. REQUIRE: the deletion was seen.
  void outlive_lease(int host, int ttl_s);

 private:
  struct Member {
    std::string addr;
    int client_port = 0;
    int peer_port = 0;
    std::unique_ptr<ChildProcess> process;
    bool running = false;
  };

  std::vector<std::string> on_host(int host, std::vector<std::string> argv) const;
  std::vector<std::string> etcdctl_argv(const std::string& endpoints, const std::vector<std::string>& args) const;
  std::string url(const Member& m) const;
  void make_dir(Tls tls, const std::vector<std::string>& addrs);
  void start(const std::map<int, Member>::iterator& at, const std::string& initial_cluster);
  void wait_serving();
  Member& member(int host);
  const Member& member(int host) const;

  Cluster* cluster_ = nullptr;  // null for the loopback member
  std::string dir_;
  bool tls_on_ = false;
  EtcdTlsFiles tls_;
  std::map<int, Member> members_;
  int leases_ = 0;
};

}  // namespace crun::test
