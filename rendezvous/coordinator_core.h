// CoordinatorCore: the rendezvous coordinator's decisions, free of the store, threads and clocks.
//
// Contract
//   Events go in (a node's join record, its alive key set or gone, a heartbeat, a report, the
//   timers), each with the time it is handled at; the effects to carry out come back, in order
//   (RendezvousCoordinator applies them to the store). next_deadline() says when on_timers() is
//   due next.
//     - Joins: a node whose configuration differs from the reference (the hosting agent's record,
//       else the first node's to join) is answered with an error naming both nodes and every
//       differing field; after the close every join is answered "closed".
//     - Rounds: once min_nodes have joined the round forms when last_call_timeout has passed, at
//       once when max_nodes have joined (after a round: once its survivors are back too, so that
//       waiting spares never take a survivor's place), and at once when every surviving node of
//       the previous round has joined again. Node ranks: rendezvous/node_order.h (rank hint, then previous
//       rank, then node id); node rank 0's address and free port become the round's master.
//     - While a round runs: a failure report ends it with Control{stop, restart_count + 1} or
//       closes the job, as the restart policy decides (base/restart_policy.h: the failure's exit
//       code with no restarts left, kExitNoProgress when no_progress_limit restarts in a row have
//       not raised the highest heartbeat step the failing nodes reported); a node that joins while
//       there is room, or a participant that is lost (alive key gone, or no heartbeat: then
//       EndAlive), ends it without counting a restart; success reported by every participant
//       closes the job with 0.
//     - Exclusion (docs/rendezvous.md): a failure report that ends a round with a restart counts
//       as its node's root cause. At exclude_after (0: never) counts since its last exclusion, or
//       at once when the report carries a worker's exclude_request, the node is excluded for
//       exclude_cooldown, doubled at each further exclusion of it, but only when the next round
//       can still reach min_nodes without it (the round's other live nodes plus the nodes
//       waiting); else one line says it is kept (an exclude_request then closes the job with
//       kExitNodeUnhealthy). The round that follows does not expect it, so it forms at once with
//       a waiting spare (node_order.h gives the spare the excluded node's rank). An excluded
//       node's join is answered with an error "excluded ..." and excluded_for_ms / reason; once
//       its cooldown ended it joins as any node. Every round answer lists the nodes excluded now.
//     - A report's stop_request closes the job at once with the report's exit code, no restart.
//     - Loss: a node is lost when nothing came from it for heartbeat_timeout after its next
//       heartbeat was due, that is for heartbeat_timeout + keep_alive_interval since the last
//       (its last beat may have gone up to keep_alive_interval before it stalled: a node stalled
//       for less than heartbeat_timeout is never lost). The scan runs every heartbeat_timeout / 4.
//     - Its own stall: any call (an event or on_timers()) made later than the next_deadline()
//       the previous on_timers() left, by more than kStallSlack, means the core was stalled that
//       long, and the first such call notices it, before the event it brings (its process stopped, its
//       thread held up), and heartbeats sent meanwhile may still be on their way. That time
//       counts towards no node's silence. A stall of heartbeat_timeout + keep_alive_interval or
//       more outlasted every agent's wait for a heartbeat's reply (heartbeat_timeout): when any
//       node but the hosting agent's own is connected, each has given up on the store, and the
//       job closes with kExitStoreLost at once instead of waiting join_timeout for nodes that
//       will not come. Callers call on_timers() at next_deadline() and after events; a test's
//       fake clock steps through the deadlines.
//     - Closing: Closed comes before the Control that publishes the close, so the coordinator
//       counts itself closed before any agent can read the close.
//     - Pruning (docs/rendezvous.md): a node's previous answer when it joins again; a lost node's
//       answer, join and heartbeat keys; when round r forms, the stop key, reports and round/ keys
//       of round r - 2; a report of a round already pruned. Prune effects may be deferred and
//       batched by the caller; every other effect is applied in order, at once. When a round
//       forms, ClearWorkerKeys comes before its Answer (the workers share this store).
//     - Progress: while a round forms, at most one line a second ("round 3: 2/4 nodes, last call
//       in 27 s"), only when it changed.
//
// Threading
//   Not thread-safe; owned and driven by one thread (the coordinator's, or a test).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/restart_policy.h"
#include "rendezvous/rendezvous_records.h"

namespace crun {

using CoordinatorClock = std::chrono::steady_clock;

namespace coordinator_effect {
// Writes these answers (answer/<node>/<seq>) in one request.
struct Answer {
  struct Entry {
    std::string node_id;
    int seq = 0;
    RoundAnswer answer;
  };
  std::vector<Entry> entries;
};
// Writes ctl/stop/<round> (kStop) or ctl/closed (kClosed).
struct Control {
  ControlEvent event;
};
// The job is over: from now on the coordinator counts itself closed.
struct Closed {};
// Writes ctl/progress.
struct Progress {
  std::string line;
};
// Deletes the node's ephemeral alive key now (it stopped heartbeating: it counts as gone).
struct EndAlive {
  std::string node_id;
};
// Deletes a key no agent can still need.
struct Prune {
  std::string key;
};
// Deletes every key under round/<round>/.
struct PruneRound {
  int round = 0;
};
// Deletes the workers' keys (store/torch_keys.h) at once, before the round's answers go out: the
// agents stopped their workers before joining, and a round that keeps the restart count (a
// membership change) must not find the last group's keys under its attempt prefix.
struct ClearWorkerKeys {};
struct Log {
  std::string line;
};
}  // namespace coordinator_effect

using CoordinatorEffect =
    std::variant<coordinator_effect::Answer, coordinator_effect::Control, coordinator_effect::Closed,
                 coordinator_effect::Progress, coordinator_effect::EndAlive, coordinator_effect::Prune,
                 coordinator_effect::PruneRound, coordinator_effect::ClearWorkerKeys, coordinator_effect::Log>;
using CoordinatorEffects = std::vector<CoordinatorEffect>;

class CoordinatorCore {
 public:
  using TimePoint = CoordinatorClock::time_point;

  // `reference`: the hosting agent's own record (absent: the first node to join sets it).
  CoordinatorCore(RendezvousConfig config, std::optional<NodeRecord> reference);

  CoordinatorEffects on_join(const NodeRecord& record, TimePoint now);
  CoordinatorEffects on_alive(const std::string& node, TimePoint now);
  CoordinatorEffects on_alive_gone(const std::string& node, TimePoint now);
  CoordinatorEffects on_heartbeat(const std::string& node, TimePoint now);
  // `outcome` nullopt: the report's record was malformed; its key is still pruned with its round.
  CoordinatorEffects on_report(int round, const std::string& node, const std::optional<RoundOutcome>& outcome,
                               TimePoint now);
  CoordinatorEffects on_timers(TimePoint now);

  // When on_timers() is due next (the heartbeat scan, the last call, a progress line); nullopt:
  // nothing is pending.
  std::optional<TimePoint> next_deadline() const;
  bool closed() const { return phase_ == Phase::kClosed; }
  // No node's alive key exists (no participant is connected).
  bool alone() const { return alive_.empty(); }
  // The newest round formed (-1 before the first), and the restart count of the rounds to come.
  int round() const { return round_; }
  int restart_count() const { return restart_count_; }
  // The wall clock minus the core's clock: excluded nodes' ends are shown on the wall clock.
  void set_wall_offset(std::chrono::milliseconds offset) { wall_offset_ = offset; }

 private:
  enum class Phase { kForming, kRunning, kClosed };
  // How late a call may come before the core counts it as its own stall (a thread woken late).
  static constexpr CoordinatorClock::duration kStallSlack = std::chrono::milliseconds(100);

  void catch_up(TimePoint now);
  bool others_alive() const;
  CoordinatorClock::duration loss_limit() const;

  void lost(const std::string& node, const std::string& why, TimePoint now);
  void answer_error(const NodeRecord& rec, const std::string& error, bool closed);
  void begin_reform(bool failure, const std::string& detail, const std::string& origin, const std::string& report,
                    const std::string& lost_node, const std::string& excluded = {});
  void try_close(TimePoint now);
  void close_round(TimePoint now);
  void prune_round(int r);
  void close_job(int exit_code, const std::string& detail, const std::string& origin, const std::string& report);
  void schedule_progress(TimePoint now);
  void publish_progress(TimePoint now);
  std::string describe(const std::string& node) const;
  bool replaceable(const std::string& node) const;
  std::string exclude(const std::string& node, const std::string& why, TimePoint now);
  std::vector<ExcludedNode> excluded_now(TimePoint now) const;
  std::int64_t wall_ms(TimePoint t) const;
  CoordinatorEffects take();

  RendezvousKeys keys_;
  RendezvousConfig cfg_;
  CoordinatorEffects out_;

  Phase phase_ = Phase::kForming;
  int round_ = -1;
  int restart_count_ = 0;
  ProgressLedger progress_;
  std::map<std::string, NodeRecord> waiting_;
  std::map<std::string, NodeRecord> known_;
  std::map<std::string, int> seen_seq_;
  std::vector<std::string> participants_;
  std::set<std::string> in_round_;  // participants_, for O(log n) membership tests
  std::set<std::string> expected_;  // the previous round's survivors, while a round forms
  std::map<std::string, int> last_rank_;
  std::map<std::string, TimePoint> last_seen_;
  std::set<std::string> alive_;
  std::optional<NodeRecord> reference_;
  std::set<std::string> succeeded_;
  std::map<std::string, int> answered_;             // node -> seq of its answer key in the store
  std::map<int, std::set<std::string>> reporters_;  // round -> nodes whose report key exists
  std::optional<TimePoint> last_call_deadline_;
  std::optional<TimePoint> progress_due_;
  TimePoint last_progress_{};
  std::string last_progress_line_;
  TimePoint next_scan_{};
  std::string host_node_;              // the hosting agent's own node (the reference given), if any
  std::optional<TimePoint> due_;       // when on_timers() is due at the latest, as its last call left it
  struct Exclusion {
    int times = 0;
    TimePoint until{};
    std::string reason;
  };
  std::map<std::string, int> root_causes_;       // node -> root-cause count since its last exclusion
  std::map<std::string, Exclusion> exclusions_;  // every node excluded in the job (its end may have passed)
  int exclusions_total_ = 0;
  std::chrono::milliseconds wall_offset_{0};
};

}  // namespace crun
