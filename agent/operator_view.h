// OperatorView: what the people running a job see of this agent from outside: its health, its
// Prometheus metrics, its status (and, on node rank 0, the whole job's), the status page, and
// its events (docs/operations.md).
//
// Contract
//   - The agent tells it what happens, as it happens (round, group started, worker exit, the
//     watchdog's verdicts, a root cause, a signal, the store lost, the end); each call updates
//     the node's status and emits the matching event (agent/event_log.h): rendezvous_round,
//     restart, worker_start, worker_exit, hang, failure, round_ended, preemption, signal,
//     store_lost, stop, node_excluded, worker_request (a worker's CRUN_CONTROL_FILE request, also
//     in its /status record and in the health once it ends the job), node_check_failed,
//     node_healthy, precheck.
//   - serve(path) answers the HTTP endpoint (agent/http_endpoint.h): "/healthz" (200 "ok ..."
//     while healthy, 503 with the reason once the agent cannot go on: a failure with no restart
//     left, from the moment it is known (while the group still stops), the job closed by the
//     coordinator, the store lost, a stop signal), "/metrics" (Prometheus text format 0.0.4), "/status" (JSON:
//     node_status.h's job_json), "/" (the page, agent/status_page.h); else 404.
//   - Sharing (multi-node): every change of this node's status, and every `share_interval` while
//     workers run (heartbeat ages move), goes to `publish`; node rank 0 asks it to gather and
//     reads the others' from `job`.
//   - Heartbeat ages come from `heartbeats` (the running group's files, read only when asked).
//
// Threading
//   One thread, the agent's event loop: every call, serve() included (the endpoint runs there).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/event_log.h"
#include "agent/exit_status.h"
#include "agent/http_endpoint.h"
#include "agent/node_status.h"
#include "base/heartbeat_file.h"

namespace crun {

struct FailureReport;
struct NodeCheckResult;
struct RoundInfo;

struct OperatorIdentity {
  std::string run_id;
  std::string role;
  std::string hostname;
  int nproc_per_node = 1;
  int max_restarts = 0;
};

// Why a worker was a root cause: the labels of crun_worker_failures_total.
enum class FailureReason { kExit, kSignal, kHang, kTimer };

class OperatorView {
 public:
  OperatorView(OperatorIdentity id, std::unique_ptr<EventLog> events);

  void round(int rendezvous_round, const RoundInfo& info, const std::string& node_id, const std::string& addr);
  void group_started(int restart_count, const std::vector<int>& pids);
  // `stopping`: crun was already stopping the group when this worker ended.
  void worker_exited(int local_rank, int pid, const ExitStatus& status, bool stopping);
  void watchdog(int local_rank, int pid, FailureReason reason, const std::string& what);
  void workers_abandoned(const std::vector<int>& local_ranks);
  // This node's root cause, known at the first failure, while the group still stops: counted in
  // crun_worker_failures_total at once; `last` (no restart follows): unhealthy from now on.
  void failure_known(int rank, int local_rank, const ExitStatus& status, bool last);
  // The coordinator closed the job with a failure: unhealthy from now on, while the group stops.
  void job_closed(const std::string& detail);
  // A root cause with the decision, once the group has stopped: this node's (origin "", counted
  // already by failure_known) or, on node rank 0, another node's.
  void failure(const FailureReport& report, bool restarting, const std::string& origin_node);
  void round_ended(int rendezvous_round, const std::string& detail);
  // Before a start: state fetched for ranks a round moved here (agent/state_replication.h), or why not.
  void state_fetched(int ranks, std::uint64_t bytes, std::chrono::milliseconds took, const std::string& error);
  void signal(int signo, bool preemption);
  void store_lost(const std::string& why);
  void stopped(int exit_code);
  // Exclusion (docs/rendezvous.md): this node's join was answered "excluded" until `until_unix`
  // (state "excluded", event node_excluded); it asks again then.
  void self_excluded(const std::string& reason, double until_unix);
  // With each round: the job's excluded nodes now and its number of exclusions so far (status,
  // crun_nodes_excluded, crun_node_exclusions_total); on node rank 0 a node new in the list is a
  // node_excluded event.
  void excluded_nodes(std::vector<ExcludedNodeStatus> nodes, int total);
  // A worker's request through CRUN_CONTROL_FILE, read as it exited (agent/control_file.h):
  // `request` is the line, "stop-job REASON".
  void worker_request(int rank, int local_rank, int pid, const std::string& request);
  // A pass of the node checks (agent/node_checks.h): an unhealthy verdict is counted
  // (crun_node_check_failures_total), shown in /status and emitted as node_check_failed; the
  // first healthy one after it emits node_healthy.
  void node_check(const NodeCheckResult& result);
  // --precheck's verdict on this node (status "precheck", event precheck): `line` as the agent
  // logged it, `verdict` crun-precheck's JSON object ("": it wrote none).
  void precheck(const std::string& line, const std::string& verdict);
  // The heartbeat timeout in force (NodeStatus::heartbeat_timeout), when it is set or changes.
  void heartbeat_timeout(const std::string& text);
  // The stacks captured on this node before a kill, grouped across its ranks
  // (agent/stack_groups.h): in its /status record ("stack_groups") and so, multi-node, in what
  // node rank 0 reads and merges; they stay until the next capture.
  void stacks_captured(StackGroups groups);
  // A capture ended on this node (event stacks_captured): the ranks it took, those whose capture
  // timed out (a part of them, or all), and how long it took.
  void capture_ended(const std::vector<int>& ranks, const std::vector<int>& timed_out, std::chrono::milliseconds took);
  // Node rank 0, the job closed: every node's stacks it gathered (agent/closing_stacks.h) are
  // final (event stacks_gathered: the node ranks in and missing, the wait); its record's
  // stack_groups become the merge, so that /status and crun status --stacks show them all until
  // it exits.
  void stacks_gathered(const std::vector<int>& nodes_in, const std::vector<int>& nodes_missing,
                       std::chrono::milliseconds waited, StackGroups merged);

  using HeartbeatReader = std::function<std::optional<Heartbeat>(int local_rank)>;
  void set_heartbeats(HeartbeatReader read) { heartbeats_ = std::move(read); }
  using Publish = std::function<void(std::string status_json, bool gather)>;
  using JobSource = std::function<std::vector<std::string>()>;
  void set_sharing(Publish publish, JobSource job);

  HttpReply serve(const std::string& path) const;
  NodeStatus status() const;
  // Re-publishes the status (heartbeat ages); the agent calls it every share_interval.
  void share() const;
  static constexpr std::chrono::seconds share_interval{2};

 private:
  std::string metrics_text() const;
  void changed() const;
  std::string failed_health(int rank, const std::string& host, const ExitStatus& status, bool no_progress) const;
  static std::string requested_health(int rank, const std::string& host, const std::string& request);

  OperatorIdentity id_;
  std::unique_ptr<EventLog> events_;
  NodeStatus node_;
  HeartbeatReader heartbeats_;
  Publish publish_;
  JobSource job_;
  std::map<int, FailureReason> watchdog_reasons_;  // local rank -> why the watchdog ended it, this group
  std::map<FailureReason, std::uint64_t> failures_;
  std::optional<double> last_failure_unix_;
  std::uint64_t worker_starts_ = 0;
  double started_unix_ = 0;
  std::set<std::pair<std::string, int>> announced_exclusions_;  // (node, times) already an event
  std::map<std::string, std::uint64_t> node_check_failures_;  // by check
};

}  // namespace crun
