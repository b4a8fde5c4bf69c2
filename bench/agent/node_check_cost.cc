// What the built-in node checks cost a restart (docs/benchmarks.md, "Node checks"): the disk
// check of a standalone agent's two directories (a run directory under /tmp, the state root
// /dev/shm) and the net check of a multi-node one, each called in the agent's own process as
// join_round() calls them; and, for comparison, one --node-check /bin/true (a fork and exec).
//
//   node_check_cost [ROUNDS]   (default 2000): medians of ROUNDS calls each, interleaved
#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "agent/node_check.h"
#include "agent/node_checks.h"

using namespace crun;
using Clock = std::chrono::steady_clock;

namespace {

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2000;
  const std::vector<std::string> dirs{"/tmp", "/dev/shm"};
  std::vector<double> disk, net, command;
  boost::asio::io_context io;
  CommandCheck check(io, "/bin/true", std::chrono::seconds(30), "/usr/bin:/bin");
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    if (!check_directories(dirs, std::uint64_t{16} << 20).empty()) return 1;
    auto t1 = Clock::now();
    if (!check_network("127.0.0.1", "127.0.0.1").empty()) return 1;
    auto t2 = Clock::now();
    disk.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    net.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    if (i % 10 == 0) {  // the command is slower: one in ten rounds
      std::optional<NodeCheckResult> r;
      auto t3 = Clock::now();
      check.run([&](NodeCheckResult x) { r = std::move(x); });
      io.restart();
      while (!r) io.run_one();
      command.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t3).count());
    }
  }
  std::printf("disk check (2 dirs)        %8.1f us  median of %d\n", median_us(disk), rounds);
  std::printf("net check                  %8.1f us  median of %d\n", median_us(net), rounds);
  std::printf("--node-check /bin/true     %8.1f us  median of %zu\n", median_us(command), command.size());
  return 0;
}
