// WorkerGroup: this node's worker processes of one start of the group (one restart count),
// watched on the agent's event loop.
//
// Contract
//   - start() spawns every worker (spawn_worker: own process group, PDEATHSIG, only fds 0-2), or
//     adopts the process a launch carries (`adopted`: a standby that took this launch,
//     agent/standby_pool.h, already contained, its pidfd and pipes handed over), and begins
//     watching its exit (pidfd) and its stdout/stderr pipes (LineRouter). Throws
//     std::system_error when a spawn fails; workers already started, and adopted processes not
//     yet watched, are killed.
//   - With a WorkerContainment (worker_containment.h), workers join the job's cgroup, are made
//     known to it as they start and end, and once the last worker of the group has been reaped
//     (before its exit is delivered) the rest of their trees is killed: each worker's process group,
//     then every remaining descendant (group_over()). Without one (tests), only the process groups.
//   - A stream whose console sink is backlogged (agent/console_sink.h) is not read until the sink
//     has drained: the worker waits on its full pipe, and the agent's loop goes on.
//   - A ready stream is read up to 16 x 64 KiB a turn; one read a turn when its router collapses
//     (--collapse-logs), so that ranks printing the same lines fast stay within a read of each
//     other (agent/line_collapse.h).
//   - When a worker ends, its pipes are drained of everything it wrote before the exit event is
//     delivered to `on_exit` (so a crashing worker's last lines are routed, and its stderr tail is
//     complete, before the agent reacts).
//   - signal_all() sends a signal to the process group of every worker, followed by SIGCONT (a
//     stopped worker must run to act on it) unless it is SIGKILL or a stop signal; kill_all()
//     sends SIGKILL.
//   - abandon() gives up on the workers still running (SIGKILL could not end them, e.g. in
//     uninterruptible sleep): their exits are no longer watched or delivered, their pipes are
//     closed, and the rest of the trees is killed as when the last worker ends; returns their
//     local ranks.
//   - The destructor SIGKILLs any worker still running and reaps it if it ends within 2 s (an
//     abandoned one is not waited for: the subreaper and the keeper get it if it ever ends), ends
//     the rest of their trees as above, and closes every pipe.
//
// Threading
//   Everything on the io_context's thread (the agent's event loop); not thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_state_machine.h"
#include "agent/line_router.h"
#include "agent/worker_process.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class WorkerContainment;

struct WorkerLaunch {
  std::string program;            // the path execve runs ("": argv[0])
  std::vector<std::string> argv;  // argv[0]: the program's name as the worker sees it
  std::vector<std::string> env;   // complete environment
  std::vector<int> cpus;          // the worker's CPU affinity (SpawnOptions::cpus); empty: inherited
  StreamRoute stdout_route;
  StreamRoute stderr_route;
  std::optional<SpawnedWorker> adopted;  // a running process that becomes this worker (no spawn)
};

class WorkerGroup {
 public:
  using ExitHandler = std::function<void(const WorkerExit&)>;

  WorkerGroup(boost::asio::io_context& io, int restart_count, ExitHandler on_exit,
              WorkerContainment* containment = nullptr);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  void start(std::vector<WorkerLaunch> launches);
  void signal_all(int signo);
  void kill_all();
  std::vector<int> abandon();

  int size() const;
  int running() const;
  int pid(int local_rank) const;
  bool is_running(int local_rank) const;  // not yet reaped
  const std::deque<std::string>& stderr_tail(int local_rank) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
