// The multi-node rendezvous' records and key layouts (docs/rendezvous.md describes the protocols).
//
// Contract
//   c10d: every key of run R lives under "crun/rdzv/<R>/". Participants write only their own keys
//   (join/<node>, alive/<node>, hb/<node>, report/<round>/<node>); the coordinator writes only
//   answer/<node>/<seq> and ctl/*, and deletes what no agent can still need (docs/rendezvous.md,
//   "Pruning").
//   etcd-v3: every key of run R lives under "<key_prefix><R>/" (EtcdKeys); each agent writes its
//   own alive/<node>, join/<round>/<node> and report/<round>/<node> keys under its lease, and any
//   agent changes the one round record (EtcdRoundRecord) by compare-and-swap.
//   Records are JSON; from_json throws std::invalid_argument naming the record and the field when
//   a peer sent something malformed.
//
// Threading
//   Value types and pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crun {

// The rendezvous settings every node must agree on (min/max/max_restarts) plus local timings.
struct RendezvousConfig {
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  int no_progress_limit = 0;  // stop with kExitNoProgress after this many restarts in a row without progress (0: never)
  std::chrono::milliseconds join_timeout{600000};
  std::chrono::milliseconds last_call_timeout{30000};
  std::chrono::milliseconds close_timeout{30000};
  std::chrono::milliseconds heartbeat_timeout{15000};
  std::chrono::milliseconds keep_alive_interval{5000};
  // Exclusion (docs/rendezvous.md, "Exclusion"): a node that was the root cause this many times
  // (0: never) is kept out for exclude_cooldown, doubled at each further exclusion of it.
  int exclude_after = 2;
  std::chrono::milliseconds exclude_cooldown{600000};
};

// A node kept out of the job's rounds for a while (docs/rendezvous.md, "Exclusion").
struct ExcludedNode {
  std::string node_id;
  std::string hostname;
  std::string addr;
  std::string reason;          // one line: why
  int times = 0;               // how many times this node was excluded in the job
  std::int64_t until_unix_ms = 0;  // when its cooldown ends, wall clock (ms since the epoch)
};

// What a node says about itself when it joins a round.
struct NodeRecord {
  std::string node_id;      // unique per agent process: "<host>:<pid>:<random>"
  std::string hostname;
  std::string addr;         // the address other nodes reach this node at
  std::uint16_t free_port = 0;  // a port free on this node, used as MASTER_PORT if it gets rank 0
  int rank_hint = -1;       // orders nodes when given (--node-rank, SLURM_NODEID)
  int seq = 0;              // increases with each join of this node
  std::uint16_t state_port = 0;  // its state replication endpoint on `addr` (agent/replica_server.h); 0: none
  // Configuration that must match across nodes.
  int nproc = 1;
  std::string role = "default";
  int max_restarts = 0;
  int min_nodes = 1;
  int max_nodes = 1;
  std::string program;
  int exclude_after = 2;
  std::int64_t exclude_cooldown_ms = 600000;

  std::string to_json() const;
  static NodeRecord from_json(const std::string& text);
  // Names every field that differs from `other`, e.g. "nproc 2 vs 4, program a.out vs b.out".
  std::string mismatch(const NodeRecord& other) const;
};

// The coordinator's answer to one join.
struct RoundAnswer {
  std::string error;  // non-empty: rejected (mismatch, closed); the rest is unset
  bool closed = false;
  int round = 0;
  int restart_count = 0;
  int node_rank = 0;
  int nnodes = 0;
  std::string master_addr;
  std::uint16_t master_port = 0;
  // By node rank: each node's state replication endpoint, "addr:port" ("" none); empty when no
  // node announced one.
  std::vector<std::string> state_endpoints;
  // The joining node is excluded (error says "excluded until T: reason"): how long its cooldown
  // still runs, and why. 0: not excluded.
  std::int64_t excluded_for_ms = 0;
  std::string excluded_reason;
  // A round's answer: the nodes excluded now (for operators), and how many exclusions the job had.
  std::vector<ExcludedNode> excluded;
  int exclusions_total = 0;

  std::string to_json() const;
  static RoundAnswer from_json(const std::string& text);
};

// A node's outcome for one round.
struct RoundOutcome {
  bool succeeded = false;
  int exit_code = 0;        // crun's exit code for the root cause (code or 128+signal)
  std::int64_t wall_time_us = 0;  // when the failure happened (for root-cause ordering)
  std::string report;       // the agent's failure report (its JSON), opaque to the rendezvous
  std::optional<std::int64_t> highest_step;  // the node's highest heartbeat step this round (none: no beats)
  // A worker's request through CRUN_CONTROL_FILE (agent/control_file.h): "exclude-node REASON"
  // (restart without this node, at once: it counts as this node's exclusion) or "stop-job REASON"
  // (close the job with `exit_code`, the requesting rank's own, without a restart). Empty: none.
  std::string exclude_request;
  std::string stop_request;

  std::string to_json() const;
  static RoundOutcome from_json(const std::string& text);
};

// What the coordinator tells every agent: stop this round, or the job is over.
struct ControlEvent {
  enum class Kind { kStop, kClosed };
  Kind kind = Kind::kStop;
  int round = 0;
  int restart_count = 0;    // for kStop: the restart count of the next round
  bool failure = false;     // kStop: a worker failed (counts as a restart); else membership
  int exit_code = 0;        // kClosed: what every agent exits with
  std::string detail;       // one line: why
  std::string origin_node;  // the node whose failure caused this, if any
  std::string report;       // that node's failure report (its JSON)
  std::string excluded;     // kStop: that node was excluded: "excluded for 600 s (exclusion 1): why"; "" not

  std::string to_json() const;
  static ControlEvent from_json(const std::string& text);
};

// "addr:port" of a node's state replication endpoint ("" when it announced none); IPv6 in brackets.
std::string state_endpoint(const NodeRecord& node);
// Every node's, in node-rank order; empty when none announced one.
std::vector<std::string> state_endpoints(const std::vector<const NodeRecord*>& nodes);

// Key names.
struct RendezvousKeys {
  explicit RendezvousKeys(const std::string& run_id) : base("crun/rdzv/" + run_id + "/") {}
  std::string base;
  std::string join_prefix() const { return base + "join/"; }
  std::string join(const std::string& node) const { return join_prefix() + node; }
  std::string answer(const std::string& node, int seq) const { return base + "answer/" + node + "/" + std::to_string(seq); }
  std::string alive_prefix() const { return base + "alive/"; }
  std::string alive(const std::string& node) const { return alive_prefix() + node; }
  std::string heartbeat_prefix() const { return base + "hb/"; }
  std::string heartbeat(const std::string& node) const { return heartbeat_prefix() + node; }
  std::string report_prefix() const { return base + "report/"; }
  std::string report(int round, const std::string& node) const { return report_prefix() + std::to_string(round) + "/" + node; }
  std::string status_prefix() const { return base + "status/"; }
  std::string status(const std::string& node) const { return status_prefix() + node; }
  std::string control_prefix() const { return base + "ctl/"; }
  std::string stop(int round) const { return control_prefix() + "stop/" + std::to_string(round); }
  std::string closed() const { return control_prefix() + "closed"; }
  // Worker-facing keys of one round (fresh per round, never reused).
  std::string round_prefix(int round) const { return base + "round/" + std::to_string(round) + "/"; }
  // A node's stacks before the kill in that round (agent/closing_stacks.h): under the round's
  // prefix, so pruned with it, and not ephemeral, so there after the node left.
  std::string stacks(int round, int node_rank) const { return round_prefix(round) + "stacks/" + std::to_string(node_rank); }
};

// etcd-v3: the run's one round record, changed only by compare-and-swap (docs/rendezvous.md).
struct EtcdRoundRecord {
  enum class Phase { kForming, kRunning, kClosed };
  Phase phase = Phase::kForming;
  int round = 0;
  int restart_count = 0;
  std::vector<std::string> expected;      // kForming: the previous round's nodes, in node-rank order
  std::vector<std::string> participants;  // kRunning: node ids, in node-rank order
  std::vector<std::string> previous;      // kForming: the previous round's nodes, in node-rank order (their ranks)
  std::string master_addr;                // kRunning: node rank 0's address and free port
  std::uint16_t master_port = 0;
  std::vector<std::string> state_endpoints;  // kRunning: as RoundAnswer's
  std::string reference;                  // the first node's NodeRecord (JSON): every node must match it
  std::optional<std::int64_t> best_step;  // the job's progress ledger (base/restart_policy.h)
  int no_progress_streak = 0;
  std::optional<ControlEvent> cause;      // why the previous round ended (kStop) or the job closed (kClosed)
  // Exclusion: every node excluded so far (its cooldown's end on the wall clock; a node whose end
  // passed may join again), each node's root-cause count since its last exclusion, and the
  // job's number of exclusions.
  std::vector<ExcludedNode> excluded;
  std::map<std::string, int> root_causes;
  int exclusions_total = 0;

  std::string to_json() const;
  static EtcdRoundRecord from_json(const std::string& text);
};

// etcd-v3: join/<round>/<node>, a node's request for a place in `round`.
struct EtcdJoinRecord {
  int round = 0;
  NodeRecord node;
  std::string to_json() const;
  static EtcdJoinRecord from_json(const std::string& text);
};

// etcd-v3: report/<round>/<node>, a node's outcome of `round` (success; a failure goes into the
// round record).
struct EtcdReportRecord {
  int round = 0;
  RoundOutcome outcome;
  std::string to_json() const;
  static EtcdReportRecord from_json(const std::string& text);
};

struct EtcdKeys {
  EtcdKeys(const std::string& key_prefix, const std::string& run_id) : base(key_prefix + run_id + "/") {}
  std::string base;
  std::string round() const { return base + "round"; }
  std::string alive_prefix() const { return base + "alive/"; }
  std::string alive(const std::string& node) const { return alive_prefix() + node; }
  std::string join_prefix(int round) const { return base + "join/" + std::to_string(round) + "/"; }
  std::string join(int round, const std::string& node) const { return join_prefix(round) + node; }
  std::string report_prefix(int round) const { return base + "report/" + std::to_string(round) + "/"; }
  std::string report(int round, const std::string& node) const { return report_prefix(round) + node; }
  // Operators' view: each node's status, under its lease (nobody watches these).
  std::string status_prefix() const { return base + "status/"; }
  std::string status(const std::string& node) const { return status_prefix() + node; }
  // A node's stacks before the kill in round `round` (agent/closing_stacks.h), by node rank: under
  // a lease of their own, so that they outlive the node.
  std::string stacks_prefix(int round) const { return base + "stacks/" + std::to_string(round) + "/"; }
  std::string stacks(int round, int node_rank) const { return stacks_prefix(round) + std::to_string(node_rank); }
};

}  // namespace crun
