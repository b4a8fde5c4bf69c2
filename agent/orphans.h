// Orphans: the agent as the child subreaper of its workers' trees.
//
// Contract
//   - The constructor makes the agent a child subreaper (PR_SET_CHILD_SUBREAPER): a process of a
//     worker's tree whose parent ends is re-parented to the agent (not to init) while the agent
//     lives, so it stays within reach.
//   - Children the agent reaps elsewhere (workers through their pidfds, the keeper) are tracked:
//     they are never reaped nor killed here, so their exit status stays theirs.
//   - reap() reaps every exited untracked child (re-parented orphans) without blocking; it runs on
//     every SIGCHLD (an asio signal_set; the handler is re-installed with SA_RESTART and
//     SA_NOCLDSTOP) and should be called again whenever a tracked child was reaped (an orphan's
//     zombie may wait behind it).
//   - kill_untracked() SIGKILLs every untracked child, waits for each to end (pidfd, within the
//     bound), reaps it, and repeats with the children that re-parented meanwhile, until none is
//     left, at most 64 times and within `bound`. Called once a group's workers are all gone, it
//     ends the rest of their trees (daemons in sessions of their own, double-forked processes).
//   - Children are listed from /proc/self/task/*/children (any thread may be the new parent).
//
// Threading
//   The agent's event-loop thread. Blocking only in kill_untracked(), for processes that were
//   sent SIGKILL, within `bound`.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace crun {

class Orphans {
 public:
  explicit Orphans(boost::asio::io_context& io);
  ~Orphans();
  Orphans(const Orphans&) = delete;
  Orphans& operator=(const Orphans&) = delete;

  void track(int pid);
  void untrack(int pid);
  void reap();
  void kill_untracked(std::chrono::milliseconds bound);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The agent's children (all threads), from /proc/self/task/*/children.
std::vector<int> own_children();

}  // namespace crun
