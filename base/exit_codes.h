// Every exit code crun itself can return, in one place (README.md, "Exit status of `crun`").
//
// Contract
//   0 success; 2 bad usage (a one-line error names what is wrong); 3 the agent could not start
//   or could not start workers; 4-7 the multi-node rendezvous ended without a round for this node;
//   8 the job stopped because its restarts made no progress (--max-no-progress-restarts).
//   Otherwise crun exits with its root-cause worker's status: the worker's exit code, or 128 + N
//   for a worker killed by signal N (also crun's own code when it stops on signal N).
//
// Threading
//   Constants only.
#pragma once

namespace crun {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitAgentError = 3;
inline constexpr int kExitRendezvousTimeout = 4;   // no round formed within join_timeout
inline constexpr int kExitRendezvousClosed = 5;    // the job closed (ended) before this node got a round
inline constexpr int kExitRendezvousRejected = 6;  // refused: a wrong token, or a configuration unlike the others'
inline constexpr int kExitStoreLost = 7;           // the rendezvous store was lost (its host died, or this node was cut off)
inline constexpr int kExitNoProgress = 8;          // restarts kept failing without progress (base/restart_policy.h): do not requeue
inline constexpr int kExitSignalBase = 128;        // + N: killed by (or stopped on) signal N

}  // namespace crun
