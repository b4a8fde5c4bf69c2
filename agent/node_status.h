// NodeStatus: what an operator sees of one agent and its workers (the /status JSON, the page,
// `crun status`, what each node publishes for node rank 0's view of the whole job).
//
// Contract
//   - Plain values, filled by OperatorView (agent/operator_view.h) on the agent's loop.
//   - to_json()/from_json() are the wire form (docs/operations.md, "/status"): from_json returns
//     nullopt for text that is not such a record (a node's published status is untrusted input),
//     and from_json(to_json(s)) == s to the millisecond.
//   - job_json(): the document GET /status answers: {"node": <this node>, "job": {"nodes": [...]}}
//     where the job holds every node's record the agent has (node rank 0: every node's; others:
//     their own), sorted by node rank; then the records of nodes in no round (node rank -1: their
//     node checks fail), each listed (nodes_outside counts them). The job's "stack_groups": every
//     listed record's stack_groups of the newest attempt among them, merged
//     (agent/stack_groups.h's merge_stack_groups); null when none has any.
//
// Threading
//   Value types and pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/stack_groups.h"

namespace crun {

struct WorkerStatus {
  int local_rank = 0;
  int rank = 0;
  int pid = 0;
  std::string state;  // "running", "succeeded", "failed", "stopped" (ended by crun), "abandoned"
  std::string exit;   // when ended: "exit code 1", "killed by SIGKILL"; "" while running
  int restarts = 0;   // starts of this worker before the current one (the group's restart count)
  std::optional<double> heartbeat_age_s;  // with heartbeats on, after its first beat
  std::optional<std::int64_t> step;       // its last heartbeat's step
  std::string request;  // its request through CRUN_CONTROL_FILE once it exited, "stop-job REASON" ("": none)
  bool operator==(const WorkerStatus&) const = default;
};

// A node the coordinator keeps out of the job's rounds for a while (docs/rendezvous.md, "Exclusion").
struct ExcludedNodeStatus {
  std::string node_id;
  std::string hostname;
  std::string addr;
  std::string reason;
  int times = 0;            // exclusions of this node in the job
  double until_unix = 0;    // when its cooldown ends (seconds since the epoch)
  bool operator==(const ExcludedNodeStatus&) const = default;
};

struct NodeStatus {
  std::string run_id;
  std::string role;
  std::string hostname;
  std::string node_id;  // the rendezvous' id of this agent ("" on one node)
  std::string addr;     // the address the other nodes reach it at ("" on one node)
  int node_rank = 0;  // -1: in no round (its node checks fail, agent/node_checks.h)
  int nodes = 1;
  int world_size = 0;
  int rendezvous_round = -1;
  int restart_count = 0;
  int max_restarts = 0;
  std::string state;   // "rendezvous", "running", "stopping", "succeeded", "failed"
  std::string health;  // "" healthy, else why not (what /healthz answers with 503)
  std::vector<WorkerStatus> workers;
  std::string last_failure;  // the newest root cause's FailureReport JSON (agent/failure_report.h); "": none
  double updated_unix = 0;   // when this record was made (seconds since the epoch)
  // Exclusion: why and until when this node is kept out ("" while it is not); node rank 0: the
  // job's excluded nodes now, and the job's number of exclusions so far.
  std::string excluded;
  std::vector<ExcludedNodeStatus> excluded_nodes;
  int exclusions_total = 0;
  // The newest node-check verdict (agent/node_checks.h): "" healthy or none run, else
  // "<check>: <reason>". Absent from an older node's JSON: "".
  std::string node_check;
  // --precheck: this node's verdict line ("0.21 s, median 0.20 s: ok"; "": none ran).
  std::string precheck;
  // The heartbeat timeout in force: "30 s", "0.503 s (auto, 2.5 x 0.201 s)", "auto: learning
  // (initial limit 30 s)"; "" when heartbeats are off. Absent from an older node's JSON: "".
  std::string heartbeat_timeout;
  // The newest stacks captured before a kill on this node, grouped across its ranks (within
  // kMaxJsonBytes); kept until the next capture. JSON "stack_groups", null when empty; absent
  // from an older node's JSON: empty.
  StackGroups stack_groups;
  bool operator==(const NodeStatus&) const = default;

  std::string to_json() const;
  static std::optional<NodeStatus> from_json(std::string_view text);
};

// `self` and the others' published records (node rank 0: every node's) as /status's document;
// records that do not parse are left out, `self` replaces its own older record.
std::string job_json(const NodeStatus& self, const std::vector<std::string>& published);

// Node rank 0's merge of the stacks before a kill (agent/stack_groups.h): `parts` (what it holds
// itself) and the stack_groups of `attempt` in every published record of run `run_id`, merged;
// records that do not parse, of another run or attempt, or with none, are left out (one without
// "stack_groups":{ is not parsed at all).
StackGroups merged_stack_groups(const std::vector<std::string>& published, const std::string& run_id, int attempt,
                                std::vector<StackGroups> parts);

}  // namespace crun
