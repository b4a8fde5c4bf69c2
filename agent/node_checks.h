// NodeChecks: every node check of this agent, run in one pass before each request for a round
// (agent.cc join_round()): the built-in ones, then each --node-check command.
//
// Contract
//   - run(done): disk, net, gpu (those not disabled that apply), then the commands one after
//     another; the first unhealthy one ends the pass. `done` runs on the loop once with it, or
//     with a healthy result (check "") when all passed. A pass already running is abandoned (its
//     command killed, its `done` never called).
//       disk: each directory in NodeCheckTargets::directories (the log dir, the state root) and
//         each --node-check-path is writable (a file created and removed) and has at least
//         min_free bytes free (statvfs f_bavail).
//       net (multi-node only): the address this node announces is on an interface that is up (when
//         one is given), and the rendezvous endpoint's host resolves (getaddrinfo, on the loop: a
//         name the resolver is slow on holds the pass for the resolver's own timeout).
//       gpu (where NVML answers, agent/gpu_memory.h): every device answers, and its used memory
//         is within kGpuMargin of the level read by take_baseline() (the first pass takes it when
//         none was taken), polled every kGpuPoll until the timeout: a restart must not start on a
//         GPU a dead worker still holds. While it waits, `waiting` gets one line, once a pass.
//   - The built-in checks run in the agent's process (no fork): microseconds each; a command is a
//     CommandCheck (agent/node_check.h), bounded by the timeout.
//   - A test double may stand in for the GPUs (the constructor's `gpu`; nullptr: none). The
//     commands are made known to `containment` (agent/worker_containment.h) as workers are.
//
// Threading
//   Everything on the agent's event-loop thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/node_check.h"
#include "agent/node_check_settings.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class GpuMemory;
class WorkerContainment;

// What the built-in checks look at, from the agent's configuration.
struct NodeCheckTargets {
  std::vector<std::string> directories;  // disk: the log dir, the state root (more: settings.paths)
  bool multi_node = false;               // net applies
  std::string announced_address;         // net: --local-addr ("" : none given)
  std::string rendezvous_host;           // net: the rendezvous endpoint's host ("" : none)
  std::string search_path = "/usr/local/bin:/usr/bin:/bin";  // where a command's program is looked for (PATH)
};

// The pure built-in checks: "" healthy, else one line.
std::string check_directories(const std::vector<std::string>& directories, std::uint64_t min_free);
std::string check_network(const std::string& announced_address, const std::string& rendezvous_host);

class NodeChecks {
 public:
  static constexpr std::uint64_t kGpuMargin = std::uint64_t{256} << 20;
  static constexpr std::chrono::milliseconds kGpuPoll{200};

  NodeChecks(boost::asio::io_context& io, NodeCheckSettings settings, NodeCheckTargets targets,
             std::unique_ptr<GpuMemory> gpu, WorkerContainment* containment = nullptr);
  ~NodeChecks();
  NodeChecks(const NodeChecks&) = delete;
  NodeChecks& operator=(const NodeChecks&) = delete;

  void take_baseline();
  void run(std::function<void(NodeCheckResult)> done, std::function<void(const std::string&)> waiting = {});
  const NodeCheckSettings& settings() const;
  // The names of the checks that apply (built-in ones that are on and apply, then the commands).
  std::vector<std::string> names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
