// EtcdRoundCore: one agent's part of the etcd-v3 rendezvous, free of etcd, threads and clocks.
// Every agent runs the same rules over the same keys; none is special (docs/rendezvous.md).
//
// Contract
//   - In: the round record (on_round/on_round_gone, from the watch or a transaction's reply, each
//     with its etcd revision; an older value than one already seen is ignored), the nodes whose
//     alive key is gone (on_node_gone: a node never comes back), the answers to the reads it asked
//     for, the agent's requests, and the time. decide(now) returns what to do now.
//   - Out: answers to this agent's request_round (a round, or an error with crun's exit code:
//     join timeout, closed, mismatch), control events for the round this agent runs (the round
//     ended: kStop; the job closed: kClosed), progress lines, this agent's keys to put (its join
//     of a round, its success report; each with a count of that round's keys: on_join_count,
//     on_report_count), a read of a round's joins (on_joins), a read of the alive keys when this
//     agent's failure may exclude it (on_alive_list), and at most one compare-and-swap of
//     the round record at a time (write_done() says it finished, whatever its result).
//   - No agent watches the others' joins or reports (that would be O(nodes^2) messages a round):
//     a joiner learns the number of joins from its own put; the one that completes the round
//     (max_nodes, or every live node of the previous round back) reads the joins and freezes it;
//     one that saw min_nodes arms the last call and freezes what joined when it expires.
//   - The rules, the same as c10d's coordinator (coordinator_core.h), decided by whichever agent
//     sees the need first, by compare-and-swap:
//       · the first agent creates the record (round 0 forming; its node record is the reference
//         every other node must match: a node unlike it is answered with an error and never joins);
//       · node ranks: rendezvous/node_order.h (rank hint, then previous rank, then node id);
//         node rank 0's address and free port are the master;
//       · a running round ends without a restart when a participant's alive key goes (its lease
//         expired, or its agent left) or when a waiting node finds room (scaling up); on a worker
//         failure, the restart policy (base/restart_policy.h, its ledger kept in the round record)
//         either ends it with restart_count + 1 or closes the job with the failure's exit code (or
//         kExitNoProgress); success reported by every participant closes it with 0.
//       · exclusion (docs/rendezvous.md), as c10d's: the failing agent counts its own root cause in
//         the record (root_causes) and, at exclude_after or on a worker's exclude_request, writes
//         itself into the record's excluded set (wall-clock end, reason, times; the cooldown
//         doubling each time) in the same compare-and-swap that ends the round, when the others
//         still reach min_nodes without it (the round's other live nodes plus the live nodes
//         outside it that are not excluded: spares, from a read of alive/ made for this
//         decision alone: watching alive/'s puts cost every agent every other's start); else it is kept (one progress line), or, on
//         an exclude_request, the job closes with kExitNodeUnhealthy. A stop_request closes the
//         job with the report's exit code. An agent that finds itself excluded is answered with
//         an error and excluded_for, without joining; once answered so, a close of the job
//         reaches it as a control event (kClosed). Each round's answer carries the nodes
//         excluded now. The ends are on the wall clock: set_wall_offset() (agents' clocks are
//         assumed in step to well under a cooldown).
//
// Threading
//   Not thread-safe; owned and driven by one thread (the backend's I/O thread, or a test).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/rendezvous_backend.h"
#include "rendezvous/rendezvous_records.h"

namespace crun {

// A compare-and-swap of the round record: put `next` if the record's mod revision is still
// `if_revision` (0: if there is no record).
struct EtcdRoundWrite {
  EtcdRoundRecord next;
  std::int64_t if_revision = 0;
  bool closes = false;  // the job ends: the record is put under a lease of close_timeout, so it goes later
};

// Puts this node's key under its lease, and counts the keys beside it: the answer goes to
// on_join_count / on_report_count.
struct EtcdRoundPut {
  int round = 0;
  std::string key, value, count_prefix;
};

struct EtcdRoundActions {
  std::vector<RoundResult> answers;
  std::vector<ControlEvent> controls;
  std::vector<std::string> progress;
  std::optional<EtcdRoundPut> join;    // answer: on_join_count
  std::optional<EtcdRoundPut> report;  // answer: on_report_count
  std::optional<int> read_joins;       // read join/<round>/: answer on_joins
  bool read_alive = false;             // list alive/ (keys only): answer on_alive_list
  std::optional<EtcdRoundWrite> write;
  std::optional<std::chrono::steady_clock::time_point> deadline;  // call decide() again by then
};

class EtcdRoundCore {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `self`: this node's record (its addr filled in); its free_port is set per request.
  EtcdRoundCore(RendezvousConfig config, EtcdKeys keys, NodeRecord self);

  // The first read: the round record (if any) and the nodes alive then, at one revision.
  void load(const std::optional<std::pair<std::string, std::int64_t>>& round, const std::vector<std::string>& alive,
            std::int64_t revision);
  void on_round(const std::string& value, std::int64_t revision);
  void on_round_gone(std::int64_t revision);
  void on_node_gone(const std::string& node);
  // The answer to read_alive: the nodes whose alive key exists (possible spares).
  void on_alive_list(const std::vector<std::string>& nodes);
  // The wall clock minus the core's clock (ms): excluded nodes' ends are on the wall clock.
  void set_wall_offset(std::chrono::milliseconds offset) { wall_offset_ = offset; }
  void on_join_count(int round, std::int64_t count, TimePoint now);
  void on_joins(int round, const std::vector<EtcdJoinRecord>& joins);
  void on_report_count(int round, std::int64_t count);
  void write_done() { write_in_flight_ = false; }

  void request_round(TimePoint now, std::uint16_t free_port);
  void publish_failure(int round, const RoundOutcome& outcome);
  void publish_success(int round);

  EtcdRoundActions decide(TimePoint now);

  const NodeRecord& self() const { return self_; }
  const EtcdKeys& keys() const { return keys_; }

 private:
  void deliver_controls(EtcdRoundActions& out);
  void answer_or_join(TimePoint now, EtcdRoundActions& out);
  std::optional<EtcdRoundWrite> next_write(TimePoint now);
  std::optional<EtcdRoundWrite> freeze(TimePoint now);
  void maybe_read_joins(TimePoint now, EtcdRoundActions& out);
  std::optional<EtcdRoundWrite> fail(const RoundOutcome& o, TimePoint now);
  EtcdRoundWrite reform(const EtcdRoundRecord& s, std::vector<std::string> expected, ControlEvent cause) const;
  EtcdRoundWrite close(const EtcdRoundRecord& s, int exit_code, const std::string& detail, const std::string& origin,
                       const std::string& report) const;
  void progress(TimePoint now, const std::string& line, EtcdRoundActions& out);
  void answer_error(const std::string& error, int exit_code, EtcdRoundActions& out);
  bool live(const std::string& node) const { return gone_.count(node) == 0; }
  std::int64_t wall_ms(TimePoint now) const;
  const ExcludedNode* exclusion_of(const std::string& node, TimePoint now) const;
  std::vector<ExcludedNode> excluded_now(TimePoint now) const;
  bool replaceable(const EtcdRoundRecord& s, TimePoint now) const;
  int live_expected() const;

  RendezvousConfig cfg_;
  EtcdKeys keys_;
  NodeRecord self_;
  bool loaded_ = false;

  // What this agent knows of the run.
  std::optional<EtcdRoundRecord> state_;
  std::string state_error_;           // the record is malformed: why
  std::int64_t state_revision_ = 0;   // its mod revision (0: no record)
  std::int64_t state_seen_ = 0;       // the newest revision applied to it (put or delete)
  std::set<std::string> gone_;        // nodes whose alive key went (they never come back)
  std::set<std::string> alive_;       // nodes whose alive key existed at the last read (load, read_alive)
  bool alive_fresh_ = false;          // alive_ was read for the failure this agent decides now
  bool need_alive_ = false;           // that failure may exclude this node: read alive/ first
  bool alive_read_in_flight_ = false;
  std::chrono::milliseconds wall_offset_{0};
  bool excluded_wait_ = false;        // answered "excluded": a close still reaches this agent
  std::string kept_line_;             // a progress line to give: this node was kept, not excluded

  // This agent.
  bool waiting_ = false;
  TimePoint join_deadline_{};
  int join_round_ = -1;     // the round this agent's join key asks for
  int running_round_ = -1;  // the round this agent's group runs (answered, no control yet)
  std::optional<std::pair<int, RoundOutcome>> failure_;
  std::optional<int> success_;                 // a success report to put
  std::optional<int> report_complete_;         // round whose reports were all in at our put
  bool write_in_flight_ = false;
  bool read_in_flight_ = false;

  // The forming round this agent joined: what it knows of the others' joins.
  std::int64_t join_count_ = -1;                  // the count our join put saw (-1: not yet)
  std::optional<TimePoint> last_call_;            // when our last call expires
  std::optional<std::vector<EtcdJoinRecord>> joins_;  // the last read of the round's joins
  bool reread_ = false;                           // something changed since that read
  bool read_after_last_call_ = false;             // that read came after the last call expired
  std::string last_progress_;
  TimePoint last_progress_at_{};
};

}  // namespace crun
