#include "tests/support/cluster.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace crun::test {

namespace {

std::string run_script(const std::vector<std::string>& args) {
  std::vector<std::string> argv{CRUN_NETNS_SCRIPT};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p(argv);
  const auto code = p.wait_exit(60s);
  INFO(CRUN_NETNS_SCRIPT << " " << args.front() << "\n" << p.out() << p.err());
  REQUIRE(code == 0);
  return p.out();
}

}  // namespace

Cluster::Cluster(int hosts) {
  REQUIRE(::geteuid() == 0);  // network namespaces need root; CI runs as root
  static std::atomic<int> serial{0};
  name_ = "cm" + std::to_string(::getpid() % 100000) + "x" + std::to_string(serial++);
  run_script({"up", name_, std::to_string(hosts)});
}

Cluster::~Cluster() {
  agents_.clear();  // kills what is left (ChildProcess), then the namespaces go
  std::string cmd = std::string(CRUN_NETNS_SCRIPT) + " down " + name_ + " >/dev/null 2>&1";
  int ignored = std::system(cmd.c_str());
  (void)ignored;
}

ChildProcess& Cluster::crun(int host, const std::vector<std::string>& flags, const std::vector<std::string>& worker_args) {
  return crun_program(host, flags, CRUN_TEST_WORKER, worker_args);
}

ChildProcess& Cluster::crun_program(int host, const std::vector<std::string>& flags, const std::string& program,
                                    const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv;
  if (!env.empty()) {
    argv.push_back("/usr/bin/env");
    argv.insert(argv.end(), env.begin(), env.end());
  }
  argv.push_back(CRUN_BIN);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(program);
  argv.insert(argv.end(), args.begin(), args.end());
  return start(host, argv);
}

ChildProcess& Cluster::start(int host, const std::vector<std::string>& argv) {
  std::vector<std::string> full{CRUN_IP_BIN, "netns", "exec", netns(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  agents_.push_back(std::make_unique<ChildProcess>(full));
  return *agents_.back();
}

void Cluster::link(int host, bool up) { run_script({"link", name_, std::to_string(host), up ? "up" : "down"}); }

std::string Cluster::run(int host, const std::vector<std::string>& argv) {
  std::vector<std::string> full{CRUN_IP_BIN, "netns", "exec", netns(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  ChildProcess p(full);
  const auto code = p.wait_exit(30s);
  INFO(argv.front() << " on host " << host << ":\n" << p.out() << p.err());
  REQUIRE(code == 0);
  return p.out() + p.err();
}

std::vector<std::string> c10d(const std::string& nnodes, int nproc, const std::string& conf, int max_restarts) {
  std::vector<std::string> f{"--nnodes", nnodes, "--nproc-per-node", std::to_string(nproc), "--rdzv-backend", "c10d",
                             "--rdzv-endpoint", Cluster::addr(1) + ":29400", "--rdzv-id", "job", "--max-restarts",
                             std::to_string(max_restarts), "--stop-timeout", "5"};
  if (!conf.empty()) {
    f.push_back("--rdzv-conf");
    f.push_back(conf);
  }
  return f;
}

bool err_has(ChildProcess& p, const std::string& needle, std::chrono::milliseconds bound) {
  const bool found = p.wait_until(
      [&](const std::string&, const std::string& err) { return err.find(needle) != std::string::npos; }, bound);
  // The agent's own account goes with the failed assertion: what it saw instead.
  if (!found) UNSCOPED_INFO("not in its stderr within " << bound.count() << " ms: " << needle << "\n--- its stderr:\n" << p.err());
  return found;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TempFile::TempFile() {
  char t[] = "/tmp/crun-mn-XXXXXX";
  int fd = ::mkstemp(t);
  REQUIRE(fd >= 0);
  ::close(fd);
  path = t;
}

TempFile::~TempFile() { ::unlink(path.c_str()); }

void terminate_host_last(const std::vector<ChildProcess*>& host_first, std::chrono::milliseconds bound) {
  for (auto it = host_first.rbegin(); it != host_first.rend(); ++it) (*it)->signal(SIGTERM);
  for (auto* p : host_first) {
    const auto code = p->wait_exit(bound);
    INFO(exit_text(code) << "; stderr:\n" << p->err());
    CHECK(code == 128 + SIGTERM);
  }
}

}  // namespace crun::test
