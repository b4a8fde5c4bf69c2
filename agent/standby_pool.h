// StandbyPool: the standby workers' processes (--standby-workers), one per local rank at most,
// between the start of the group that spawned them and the next start that takes them.
//
// Contract
//   - start(local_rank, plan) spawns the standby of agent/standby_plan.h's plan_standby_launch
//     with a worker's containment (spawn_worker: its own process group, PDEATHSIG, the job's
//     cgroup, the plan's CPUs; WorkerContainment::standby_started) and the read end of a fresh pipe
//     as its descriptor 3. What it writes goes to crun's log, each line tagged
//     "crun: standby<local rank>: ". A spawn that fails costs one line; that rank starts cold.
//   - A standby that ends while it waits is reaped at once (its exit is never a worker's), its
//     streams drained; why it ended (its exit status and the last line of its stderr) is kept for
//     take().
//   - take(local_rank, worker) gives up the rank's standby in every case. Alive and fitting
//     (standby_misfit), it is sent the round's message (standby_message; the pipe is grown to
//     hold it and written without blocking, then closed) and returned as a SpawnedWorker: its pid,
//     pidfd and the read ends of its stdout and stderr, whose unread output was routed to the log
//     first (WorkerContainment::standby_taken: it is a worker from now on). Otherwise nothing is
//     returned and `why` says, in a few words, why that rank starts cold ("" when no standby was
//     kept for it); a live standby that cannot take the launch is SIGKILLed and reaped first.
//   - kept() lists, per local rank, whether a standby is kept (alive or not yet taken).
//   - The destructor SIGKILLs every standby's process group and reaps each one within 2 s.
//
// Threading
//   The agent's event-loop thread; not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/worker_launch.h"
#include "agent/worker_process.h"

namespace boost::asio {
class io_context;
}

namespace crun {

class ConsoleSink;
class WorkerContainment;

class StandbyPool {
 public:
  StandbyPool(boost::asio::io_context& io, int nproc, WorkerContainment* containment, ConsoleSink* log);
  ~StandbyPool();
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  void start(int local_rank, const WorkerLaunchPlan& standby);

  struct Taken {
    std::optional<SpawnedWorker> worker;
    std::string why;
  };
  Taken take(int local_rank, const WorkerLaunchPlan& worker);

  std::vector<bool> kept() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
