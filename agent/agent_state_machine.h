// AgentStateMachine: the agent's decisions, free of processes, sockets and clocks.
//
// Contract
//   Events go in (start, a round, a worker exited, a signal arrived, the stop grace expired); the
//   actions to carry out come back, in order. The caller performs them and feeds back what happens.
//   Every group starts in a round of the rendezvous (rendezvous/rendezvous_backend.h):
//     - start()                 -> JoinRound
//     - on_round(restart_count) while joining -> StartGroup{restart_count}
//     - every worker exits 0    -> Exit{0}
//     - first failing exit      -> it becomes the root cause; CaptureStacks + SignalGroup{SIGTERM} +
//                                  ArmStopTimer (every stop crun starts itself, not a handled
//                                  signal's, begins with CaptureStacks: the agent takes the still
//                                  running workers' stacks, within its bound, before it performs
//                                  what follows; agent/stack_capture.h)
//     - handled signal          -> SignalGroup{signal} (forwarded) + ArmStopTimer; crun ends with
//                                  Exit{128 + signal} once every worker is gone
//     - stop grace expired      -> KillGroup (SIGKILL to every worker's process group) and
//                                  ArmStopTimer again, as long
//     - expired again           -> AbandonWorkers (workers SIGKILL could not end, e.g. in
//                                  uninterruptible sleep, are left behind), then as if every
//                                  worker were gone: stopping is bounded by twice the grace
//     - all workers gone while stopping -> CancelStopTimer, then for a failure ReportFailure and
//                                  either JoinRound (restarts remain: the next round's restart
//                                  count is one more) or Exit{root cause code: exit code, or
//                                  128 + signal}; or, when no_progress_limit restarts in a row
//                                  have not raised the highest step record_step() was given
//                                  (base/restart_policy.h), ReportFailure{no_progress} and
//                                  Exit{kExitNoProgress}
//     - on_worker_hung(killed)  -> it is the root cause at once (PublishFailure when coordinated),
//                                  then the stop as for a failure; the exits that follow, its own
//                                  included, are our stop's
//   Root cause = the first failing exit observed, by time, of the current round, or the hung
//   worker's; exits caused by our own stop are never the root cause. Events of an older round are
//   ignored.
//
//   Coordinated (multi-node) mode: the rendezvous coordinator, not this node, decides restarts;
//   max_restarts is not consulted.
//     - the round ended by the coordinator, once workers are gone -> JoinRound
//     - first failing exit -> PublishFailure (at once: other nodes stop within milliseconds) and
//       the stop as above; once all are gone, ReportFailure with the coordinator's decision:
//       restarting when it ended the round, not when it closed the job (or this node leaves on a
//       signal); until the decision comes, the node waits
//     - every worker exits 0 -> PublishSuccess, then wait
//     - on_round_ended() -> stop the workers (if any), then JoinRound
//     - on_job_closed(code) -> stop the workers (if any), then Exit{code} (after ReportFailure
//       when this node's own failure started the stop)
//     - a handled signal while joining or waiting -> Exit{128 + signal}
//   A second signal while stopping is forwarded; crun then exits for it, unless the first was a
//   preemption notice (SIGUSR1/SIGUSR2), whose code stands.
//
//   A worker's request (WorkerExit::request: what its CRUN_CONTROL_FILE governs, agent/control_file.h),
//   acted on when its worker exits:
//     - while the group runs, any exit with a request ends the group, exit code 0 included: the
//       requester is the root cause (FailureKnown{last} on one node, unless a stop-job from an exit
//       0, which is no failure), PublishFailure when coordinated (the agent fills the outcome's
//       exclude_request / stop_request), and the stop as for a failure
//     - one node, while stopping for a failure or a hang (not a signal): a request still counts;
//       a stop-job outranks an exclude-node, otherwise the first stands; the requester becomes the
//       root cause, except a stop-job from an exit 0, which keeps the root cause there was
//     - one node, once every worker is gone: no restart, whatever --max-restarts leaves;
//       exclude-node -> ReportFailure + Exit{kExitNodeUnhealthy} (no other node can take this
//       one's place); stop-job -> ReportFailure + Exit{root cause's code} (kExitNodeUnhealthy
//       when that is an exclude-node's exit 0), or Exit{0} without a report when the requester
//       exited 0 and nothing failed before it
//     - coordinated: the coordinator decides, as for any failure; a request that comes while the
//       group already stops is not acted on (the coordinator ended the round at the first failure)
//   Requests of a group stopped by a signal, or by the coordinator, change nothing.
//
//   Pre-flight check (policy.precheck, docs/operations.md "Pre-flight check"): the job's first
//   start is StartGroup{restart_count, precheck = true} (crun-precheck in place of the program),
//   unless forgo_precheck() came first (the agent's first round is not the job's first: a spare);
//   never again, whatever follows (a round ended, a restart). Its exits are those of any group
//   (a failure, a request, a hang, a signal: as above), except when every worker exits 0:
//   PrecheckDone (no PublishSuccess), then on_precheck_verdict(proceed):
//     - proceed (no node was slow) -> StartGroup{the same restart_count}: the real workers, in
//       the same round
//     - not (another node was slow; it asks for its own exclusion) -> wait for the coordinator's
//       round end (JoinRound) or close, as after PublishSuccess
//
// Threading
//   Not thread-safe; owned and driven by the agent's event-loop thread (or a test).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/control_file.h"
#include "agent/exit_status.h"
#include "base/exit_codes.h"
#include "base/restart_policy.h"

namespace crun {

using AgentClock = std::chrono::steady_clock;

// One worker process ended (reaped).
struct WorkerExit {
  int restart_count = 0;  // of the group the worker belonged to
  int local_rank = 0;
  int pid = 0;
  ExitStatus status;       // exit code or signal
  AgentClock::time_point when{};
  std::chrono::system_clock::time_point wall_time{};
  std::optional<WorkerRequest> request;  // what its CRUN_CONTROL_FILE asked for (the governing line)

  bool failed() const { return status.failed(); }
  // The code crun exits with when this is the root cause: exit code, or 128 + signal.
  int crun_exit_code() const { return status.crun_exit_code(); }
};

namespace action {
struct StartGroup {
  int restart_count;
  bool precheck = false;  // crun-precheck in place of the program
};
// Every precheck worker exited 0: read the verdict, then on_precheck_verdict.
struct PrecheckDone {};
// Take the running workers' stacks before the actions that follow (a stop crun starts itself).
struct CaptureStacks {};
struct SignalGroup {
  int signo;
};
struct KillGroup {};
struct AbandonWorkers {};
struct ArmStopTimer {
  AgentClock::time_point deadline;
};
struct CancelStopTimer {};
// The group's root cause is known (its first failure, or a hung worker), before the group has
// stopped: counted at once; `last` when no restart can follow it (single node, no restart left;
// coordinated, the coordinator decides later), so the agent's health says so while it stops.
struct FailureKnown {
  WorkerExit root_cause;
  bool last = false;
};
struct ReportFailure {
  WorkerExit root_cause;
  bool restarting;
  bool no_progress = false;  // not restarting because restarts made no progress (kExitNoProgress)
};
struct Exit {
  int code;
};
struct JoinRound {};
struct PublishFailure {
  WorkerExit root_cause;
};
struct PublishSuccess {};
}  // namespace action

using AgentAction = std::variant<action::StartGroup, action::SignalGroup, action::KillGroup, action::AbandonWorkers,
                                 action::ArmStopTimer, action::CancelStopTimer,
                                 action::FailureKnown, action::ReportFailure, action::Exit, action::JoinRound,
                                 action::PublishFailure, action::PublishSuccess, action::PrecheckDone,
                                 action::CaptureStacks>;
using AgentActions = std::vector<AgentAction>;

// SIGUSR1 and SIGUSR2: a scheduler's preemption notice (Slurm's --signal=USR1@60).
bool is_preemption_notice(int signo);

struct AgentPolicy {
  int nproc = 1;
  int max_restarts = 0;  // single node only: coordinated mode takes the coordinator's decision
  std::chrono::milliseconds stop_timeout{30000};
  bool coordinated = false;  // multi-node: the rendezvous decides restarts
  int no_progress_limit = 0;  // single node: stop after this many restarts in a row without progress (0: never)
  bool precheck = false;      // --precheck: the first start runs crun-precheck
};

class AgentStateMachine {
 public:
  enum class State { kIdle, kJoining, kRunning, kStopping, kWaiting, kDone };

  explicit AgentStateMachine(AgentPolicy policy);

  AgentActions start(AgentClock::time_point now);
  AgentActions on_worker_exit(const WorkerExit& exit);
  AgentActions on_signal(int signo, AgentClock::time_point now);
  AgentActions on_stop_timeout(AgentClock::time_point now);
  // A watchdog found a worker hung; `killed` is its exit as the agent is about to cause it
  // (SIGKILL). It is the root cause at once, whatever order the group's exits then arrive in
  // (coordinated: published at once, before its peers can fail on its death), and the group stops.
  AgentActions on_worker_hung(const WorkerExit& killed, AgentClock::time_point now);
  // A heartbeat step a worker of the current group reached (the agent reads them as workers exit).
  void record_step(std::int64_t step);
  // Coordinated mode.
  AgentActions on_round(int restart_count);
  AgentActions on_round_ended(AgentClock::time_point now);
  AgentActions on_job_closed(int code, AgentClock::time_point now);
  // The round about to start is not the job's first: no precheck (the others ran theirs, or none).
  void forgo_precheck() { precheck_pending_ = false; }
  // After PrecheckDone: `proceed` when the verdict names no slow node.
  AgentActions on_precheck_verdict(bool proceed);

  State state() const { return state_; }
  int restart_count() const { return restart_count_; }
  const std::optional<WorkerExit>& root_cause() const { return root_cause_; }

 private:
  AgentActions begin_stop(int signo, AgentClock::time_point now);
  AgentActions on_all_exited();
  action::FailureKnown failure_known(const WorkerExit& root) const;
  AgentActions start_round();
  // A worker's exit that carries a request (see the contract).
  void take_request(const WorkerExit& exit, AgentActions& actions);
  // One node: the outcome of a group a request ended, once every worker is gone.
  void finish_request(AgentActions& actions);
  // Coordinated: ReportFailure for this round's root cause, once, with the coordinator's decision.
  void report_decision(AgentActions& actions, bool restarting, bool no_progress = false);

  AgentPolicy policy_;
  State state_ = State::kIdle;
  int restart_count_ = 0;
  int exited_ = 0;              // workers of the current group that have exited
  int stop_signal_ = 0;         // handled signal that caused the stop (0: a worker failure)
  bool killed_ = false;
  bool round_ended_ = false;          // the coordinator ended the round: rejoin once stopped
  std::optional<int> closing_code_;   // the coordinator closed the job: exit once stopped
  std::optional<WorkerExit> root_cause_;
  std::optional<std::int64_t> attempt_step_;  // the highest step of the current group
  ProgressLedger progress_;                    // attempts in a row without progress (single node)
  bool failure_reported_ = false;     // ReportFailure went out for root_cause_
  std::optional<WorkerExit> requester_;  // the exit whose request governs this group
  bool precheck_pending_ = false;  // the next start is the pre-flight check
  bool precheck_group_ = false;    // the current group is the pre-flight check
  bool awaiting_verdict_ = false;  // PrecheckDone went out; on_precheck_verdict comes next
};

}  // namespace crun
