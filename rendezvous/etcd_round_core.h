// EtcdRoundCore: one agent's part of the etcd-v3 rendezvous, free of etcd, threads and clocks.
// Every agent runs the same rules over the same keys; none is special (docs/rendezvous.md).
//
// Contract
//   - In: what the run's keys hold (on_put/on_delete, from the watch or a transaction's reply,
//     each with its etcd revision; an older value of the round record than one already seen is
//     ignored), the agent's requests, and the time. decide(now) returns what to do now.
//   - Out: answers to this agent's request_round (a round, or an error with crun's exit code:
//     join timeout, closed, mismatch), control events for the round this agent runs (the round
//     ended: kStop; the job closed: kClosed), progress lines, this agent's own keys to put (join,
//     report; under its lease), and at most one compare-and-swap of the round record at a time
//     (write_done() says it finished, whatever its result).
//   - The rules, the same as c10d's coordinator (coordinator_core.h) but decided by whichever
//     agent sees the need first, by compare-and-swap:
//       · the first agent creates the record (round 0 forming; its node record is the reference
//         every other node must match);
//       · a forming round freezes (running, ranks assigned) at once when max_nodes joined, or
//         when every live node of the previous round rejoined and min_nodes joined, else
//         last_call_timeout after min_nodes joined (as this agent saw it). Node ranks: rank hint,
//         then previous rank, then node id;
//       · a running round ends without a restart when a participant's alive key is gone (its
//         lease expired, or its agent left) or when a waiting node finds room (scaling up);
//         with restart_count + 1 on a worker failure while restarts remain and the progress
//         ledger allows, else the job closes with the failure's exit code (or kExitNoProgress);
//         every participant's success report for the round closes it with 0.
//
// Threading
//   Not thread-safe; owned and driven by one thread (the backend's I/O thread, or a test).
#pragma once

#include <chrono>
#include <map>
#include <optional>
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

struct EtcdRoundActions {
  std::vector<RoundResult> answers;
  std::vector<ControlEvent> controls;
  std::vector<std::string> progress;
  std::vector<std::pair<std::string, std::string>> puts;  // this agent's keys (under its lease)
  std::optional<EtcdRoundWrite> write;
  std::optional<std::chrono::steady_clock::time_point> deadline;  // call decide() again by then
};

class EtcdRoundCore {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `self`: this node's record (its addr filled in); its free_port is set per request.
  EtcdRoundCore(RendezvousConfig config, EtcdKeys keys, NodeRecord self);

  void on_put(const std::string& key, const std::string& value, std::int64_t revision);
  void on_delete(const std::string& key, std::int64_t revision);
  // The initial read of the run's keys is in: decisions may start.
  void loaded() { loaded_ = true; }

  void request_round(TimePoint now, std::uint16_t free_port);
  void publish_failure(int round, const RoundOutcome& outcome);
  void publish_success(int round);
  void write_done() { write_in_flight_ = false; }

  EtcdRoundActions decide(TimePoint now);

  const NodeRecord& self() const { return self_; }
  const EtcdKeys& keys() const { return keys_; }

 private:
  void deliver_controls(EtcdRoundActions& out);
  void answer_or_join(TimePoint now, EtcdRoundActions& out);
  std::optional<EtcdRoundWrite> next_write(TimePoint now, EtcdRoundActions& out);
  std::optional<EtcdRoundWrite> freeze(TimePoint now, EtcdRoundActions& out);
  std::optional<EtcdRoundWrite> fail(const RoundOutcome& o);
  EtcdRoundWrite reform(const EtcdRoundRecord& s, std::vector<std::string> expected, ControlEvent cause) const;
  EtcdRoundWrite close(const EtcdRoundRecord& s, int exit_code, const std::string& detail, const std::string& origin,
                       const std::string& report) const;
  void progress(TimePoint now, const std::string& line, EtcdRoundActions& out);
  void answer_error(const std::string& error, int exit_code, EtcdRoundActions& out);
  bool in(const std::vector<std::string>& nodes, const std::string& node) const;

  RendezvousConfig cfg_;
  EtcdKeys keys_;
  NodeRecord self_;
  bool loaded_ = false;

  // The mirror of the run's keys.
  std::optional<EtcdRoundRecord> state_;
  std::string state_error_;           // the record is malformed: why
  std::int64_t state_revision_ = 0;   // its mod revision (0: no record)
  std::int64_t state_seen_ = 0;       // the newest revision applied to it (put or delete)
  std::map<std::string, std::int64_t> alive_;
  std::map<std::string, EtcdJoinRecord> joins_;
  std::map<std::string, EtcdReportRecord> reports_;

  // This agent.
  bool waiting_ = false;
  TimePoint join_deadline_{};
  int join_round_ = -1;     // the round this agent's join key asks for
  int running_round_ = -1;  // the round this agent's group runs (answered, no control yet)
  std::optional<std::pair<int, RoundOutcome>> failure_;
  std::vector<std::pair<std::string, std::string>> pending_puts_;
  bool write_in_flight_ = false;
  std::optional<std::pair<int, TimePoint>> min_reached_;  // round, when min_nodes had joined it
  std::string last_progress_;
  TimePoint last_progress_at_{};
};

}  // namespace crun
