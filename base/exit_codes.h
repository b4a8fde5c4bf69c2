// Every exit code a launch of crun can return, in one place: the constants the code uses and the
// table of what each means. `crun --help` prints the table (launcher/command_line.cc) and README.md
// ("Exit status of `crun`") lists it, row for row, checked by the test base.exit_codes.
//
// Contract
//   0 success; 2 bad usage (a one-line error names what is wrong); 3 the agent could not start
//   or could not start workers; 4-7 the multi-node rendezvous ended without a round for this node;
//   8 the job stopped because its restarts made no progress (--max-no-progress-restarts);
//   9 this node is unhealthy: its node checks failed until its join timeout ended (--standalone: at
//   once), or a worker asked to exclude a node that has no other to replace it.
//   Otherwise crun exits with its root-cause worker's status: the worker's exit code, or 128 + N
//   for a worker killed by signal N (also crun's own code when it stops on signal N).
//   kExitCodes: one row per code in that order, as README.md shows it; `code` is the number, or
//   "N" / "128+S" for the codes a worker or a signal gives; `summary` fits one line of --help;
//   `details` is README's text without its Markdown. The subcommands (`crun status`,
//   `crun store`) say what they return in their own headers.
//
// Threading
//   Constants only.
#pragma once

#include <string_view>

namespace crun {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitAgentError = 3;
inline constexpr int kExitRendezvousTimeout = 4;   // no round formed within join_timeout
inline constexpr int kExitRendezvousClosed = 5;    // the job closed (ended) before this node got a round
inline constexpr int kExitRendezvousRejected = 6;  // refused: a wrong token, or a configuration unlike the others'
inline constexpr int kExitStoreLost = 7;           // the rendezvous store was lost (its host died, or this node was cut off)
inline constexpr int kExitNoProgress = 8;          // restarts kept failing without progress (base/restart_policy.h): do not requeue
inline constexpr int kExitNodeUnhealthy = 9;       // this node's checks failed (or a worker asked to exclude it) and no round can use it
inline constexpr int kExitSignalBase = 128;        // + N: killed by (or stopped on) signal N

struct ExitCodeMeaning {
  std::string_view code;
  std::string_view summary;
  std::string_view details;
};

inline constexpr ExitCodeMeaning kExitCodes[] = {
    {"0", "every worker succeeded", "every worker of the last round exited 0, on every node"},
    {"N", "the root-cause worker's exit code, restarts exhausted",
     "restarts exhausted: the root-cause worker's own exit code (128+S if it died of signal S), on every node"},
    {"128+S", "crun got signal S (138: preempted)",
     "crun itself got signal S (after forwarding it to the workers); 138 = preempted (SIGUSR1)"},
    {"2", "bad usage", "one line names the flag or value"},
    {"3", "agent error", "the agent could not start, or could not start workers (spawn, log directory or port failure)"},
    {"4", "rendezvous timeout", "no round formed within join_timeout"},
    {"5", "rendezvous closed", "the job already ended before this node got a round"},
    {"6", "rejected by the rendezvous",
     "wrong token, or a configuration that differs from the other nodes'; etcd-v3: etcd refused the TLS handshake or "
     "the credentials"},
    {"7", "rendezvous store lost",
     "the rendezvous store was lost (its host died, or this node was cut off); etcd-v3: no member answered for "
     "lease_ttl + 5 s, or this node's lease expired"},
    {"8", "restarts made no progress (do not requeue)",
     "with heartbeats on, --max-no-progress-restarts restarts in a row (default 3) did not raise the highest heartbeat "
     "step: stopped rather than restarted, and scripts/sbatch/preemptible.sbatch does not requeue it"},
    {"9", "this node is unhealthy",
     "its node checks (--node-check, gpu, disk, net) still failed when its join timeout ended (--standalone: at once), "
     "or a worker asked to exclude a node no other can replace; the line before says which check and why"},
};

// A row's code is the constant's number ("128+S": kExitSignalBase's): checked as the code is built.
namespace exit_codes_detail {
constexpr bool spells(std::string_view text, int code) {
  if (text.ends_with("+S")) text.remove_suffix(2);
  int value = 0;
  for (char c : text) value = value * 10 + (c - '0');
  return !text.empty() && value == code;
}
}  // namespace exit_codes_detail
static_assert(exit_codes_detail::spells(kExitCodes[0].code, kExitSuccess));
static_assert(exit_codes_detail::spells(kExitCodes[2].code, kExitSignalBase));
static_assert(exit_codes_detail::spells(kExitCodes[3].code, kExitUsage));
static_assert(exit_codes_detail::spells(kExitCodes[4].code, kExitAgentError));
static_assert(exit_codes_detail::spells(kExitCodes[5].code, kExitRendezvousTimeout));
static_assert(exit_codes_detail::spells(kExitCodes[6].code, kExitRendezvousClosed));
static_assert(exit_codes_detail::spells(kExitCodes[7].code, kExitRendezvousRejected));
static_assert(exit_codes_detail::spells(kExitCodes[8].code, kExitStoreLost));
static_assert(exit_codes_detail::spells(kExitCodes[9].code, kExitNoProgress));
static_assert(exit_codes_detail::spells(kExitCodes[10].code, kExitNodeUnhealthy));

}  // namespace crun
