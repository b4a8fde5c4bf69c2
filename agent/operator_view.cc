#include "agent/operator_view.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <dirent.h>
#include <nlohmann/json.hpp>

#include "agent/failure_report.h"
#include "agent/metrics_text.h"
#include "agent/node_check.h"
#include "agent/signal_names.h"
#include "agent/status_page.h"
#include "rendezvous/rendezvous_backend.h"

namespace crun {

namespace {

using nlohmann::json;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char* reason_label(FailureReason r) {
  switch (r) {
    case FailureReason::kExit: return "exit";
    case FailureReason::kSignal: return "signal";
    case FailureReason::kHang: return "hang";
    case FailureReason::kTimer: return "timer";
  }
  return "exit";
}

// A JSON object's members without its braces (EventLog's `fields`).
std::string members(const json& j) {
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 2 ? text.substr(1, text.size() - 2) : "";
}

// The members every event has: the job, this host and its node rank.
json event_fields(const OperatorIdentity& id, const NodeStatus& node) {
  return {{"run_id", id.run_id}, {"hostname", id.hostname}, {"node_rank", node.node_rank}};
}

// ... and a worker's event: the group's restart count, the worker's ranks and pid.
json worker_fields(const OperatorIdentity& id, const NodeStatus& node, int local_rank, int pid) {
  json j = event_fields(id, node);
  j["restart_count"] = node.restart_count;
  j["local_rank"] = local_rank;
  j["rank"] = local_rank >= 0 && static_cast<std::size_t>(local_rank) < node.workers.size()
                  ? json(node.workers[static_cast<std::size_t>(local_rank)].rank)
                  : json(nullptr);
  j["pid"] = pid;
  return j;
}

struct ProcessStats {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
};

ProcessStats self_stats() {
  ProcessStats s;
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    s.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                    static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  if (FILE* f = std::fopen("/proc/self/statm", "re")) {
    long size = 0, resident = 0;
    if (std::fscanf(f, "%ld %ld", &size, &resident) == 2) s.resident_bytes = static_cast<double>(resident) * ::sysconf(_SC_PAGESIZE);
    std::fclose(f);
  }
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int n = 0;
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    s.open_fds = n - 1;  // the directory's own descriptor
  }
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) s.max_fds = static_cast<double>(rl.rlim_cur);
  return s;
}

}  // namespace

OperatorView::OperatorView(OperatorIdentity id, std::unique_ptr<EventLog> events)
    : id_(std::move(id)), events_(std::move(events)), started_unix_(unix_now()) {
  node_.run_id = id_.run_id;
  node_.role = id_.role;
  node_.hostname = id_.hostname;
  node_.max_restarts = id_.max_restarts;
  node_.state = "rendezvous";
  for (auto r : {FailureReason::kExit, FailureReason::kSignal, FailureReason::kHang, FailureReason::kTimer}) failures_[r] = 0;
}

void OperatorView::set_sharing(Publish publish, JobSource job) {
  publish_ = std::move(publish);
  job_ = std::move(job);
  changed();
}

void OperatorView::round(int rendezvous_round, const RoundInfo& info, const std::string& node_id, const std::string& addr) {
  // A node that joins a job already restarted (scale-up) starts at its count: no restart of its own.
  const bool restart = node_.rendezvous_round >= 0 && info.restart_count > node_.restart_count;
  node_.node_id = node_id;
  node_.addr = addr;
  node_.node_rank = info.group_rank;
  node_.nodes = info.group_world_size;
  node_.world_size = info.world_size;
  node_.rendezvous_round = rendezvous_round;
  node_.restart_count = info.restart_count;
  node_.state = "starting";
  node_.health.clear();
  node_.excluded.clear();
  node_.workers.clear();
  for (int lr = 0; lr < id_.nproc_per_node; ++lr) {
    WorkerStatus w;
    w.local_rank = lr;
    w.rank = info.rank_offset + lr;
    w.state = "starting";
    w.restarts = info.restart_count;
    node_.workers.push_back(w);
  }
  json common = event_fields(id_, node_);
  common["restart_count"] = info.restart_count;
  if (restart) {
    json j = common;
    j["max_restarts"] = id_.max_restarts;
    events_->emit("restart", members(j));
  }
  json j = common;
  j["round"] = rendezvous_round;
  j["nodes"] = info.group_world_size;
  j["world_size"] = info.world_size;
  j["master_addr"] = info.master_addr;
  j["master_port"] = info.master_port;
  j["node_id"] = node_id;
  events_->emit("rendezvous_round", members(j));
  changed();
}

void OperatorView::group_started(int restart_count, const std::vector<int>& pids) {
  node_.state = "running";
  node_.restart_count = restart_count;
  watchdog_reasons_.clear();
  for (std::size_t i = 0; i < pids.size() && i < node_.workers.size(); ++i) {
    auto& w = node_.workers[i];
    w.pid = pids[i];
    w.state = "running";
    w.exit.clear();
    w.heartbeat_age_s.reset();
    w.step.reset();
    w.request.clear();
    ++worker_starts_;
    events_->emit("worker_start", members(worker_fields(id_, node_, w.local_rank, w.pid)));
  }
  changed();
}

void OperatorView::worker_exited(int local_rank, int pid, const ExitStatus& status, bool stopping) {
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= node_.workers.size()) return;
  auto& w = node_.workers[static_cast<std::size_t>(local_rank)];
  w.state = !status.failed() ? "succeeded" : (stopping && !watchdog_reasons_.count(local_rank) ? "stopped" : "failed");
  w.exit = status.describe();
  json j = worker_fields(id_, node_, local_rank, pid);
  j["state"] = w.state;
  j["exit_code"] = status.signaled() ? json(nullptr) : json(status.exit_code());
  j["signal"] = status.signaled() ? json(signal_name(status.signal())) : json(nullptr);
  events_->emit("worker_exit", members(j));
  if (w.state == "failed" && node_.state == "running") node_.state = "stopping";
  changed();
}

void OperatorView::watchdog(int local_rank, int pid, FailureReason reason, const std::string& what) {
  watchdog_reasons_[local_rank] = reason;
  json j = worker_fields(id_, node_, local_rank, pid);
  j["reason"] = reason == FailureReason::kTimer ? "file_timer" : "heartbeat";
  j["detail"] = what;
  events_->emit("hang", members(j));
}

void OperatorView::workers_abandoned(const std::vector<int>& local_ranks) {
  for (int lr : local_ranks) {
    if (lr >= 0 && static_cast<std::size_t>(lr) < node_.workers.size()) node_.workers[static_cast<std::size_t>(lr)].state = "abandoned";
  }
  changed();
}

void OperatorView::failure_known(int rank, int local_rank, const ExitStatus& status, bool last) {
  FailureReason reason = status.signaled() ? FailureReason::kSignal : FailureReason::kExit;
  if (auto it = watchdog_reasons_.find(local_rank); it != watchdog_reasons_.end()) reason = it->second;
  ++failures_[reason];
  const std::string* request = nullptr;
  if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < node_.workers.size()) {
    request = &node_.workers[static_cast<std::size_t>(local_rank)].request;
  }
  if (last) {
    node_.health = request && !request->empty() ? requested_health(rank, id_.hostname, *request)
                                                : failed_health(rank, id_.hostname, status, false);
  }
  changed();
}

void OperatorView::job_closed(const std::string& detail) {
  node_.health = "failed: the job closed: " + detail;
  changed();
}

std::string OperatorView::failed_health(int rank, const std::string& host, const ExitStatus& status, bool no_progress) const {
  return "failed: rank " + std::to_string(rank) + " on " + host + " " + status.describe() +
         (no_progress ? ", and restarts made no progress"
                             : ", no restart left (--max-restarts " + std::to_string(id_.max_restarts) + ")");
}

void OperatorView::failure(const FailureReport& report, bool restarting, const std::string& origin_node) {
  const double when = std::chrono::duration<double>(report.time.time_since_epoch()).count();
  if (!last_failure_unix_ || when >= *last_failure_unix_) {
    last_failure_unix_ = when;
    FailureReport shown = report;  // the stacks are in stack_groups (this node's) and the job's merge
    shown.stack_groups = {};
    node_.last_failure = shown.to_json();
  }
  if (!restarting) {
    node_.health = !report.request.empty() ? requested_health(report.rank, report.host, report.request)
                                           : failed_health(report.rank, report.host, report.status, report.no_progress);
  }
  json j = event_fields(id_, node_);
  j["restart_count"] = report.restart_count;
  j["restarting"] = restarting;
  j["origin_node"] = origin_node.empty() ? node_.node_id : origin_node;
  j["root_cause"] = json::parse(report.to_json(), nullptr, false);
  events_->emit("failure", members(j));
  changed();
}

void OperatorView::round_ended(int rendezvous_round, const std::string& detail) {
  if (node_.state == "running") node_.state = "stopping";
  json j = event_fields(id_, node_);
  j["round"] = rendezvous_round;
  j["detail"] = detail;
  events_->emit("round_ended", members(j));
  changed();
}

void OperatorView::state_fetched(int ranks, std::uint64_t bytes, std::chrono::milliseconds took, const std::string& error) {
  json j = event_fields(id_, node_);
  j["ranks"] = ranks;
  j["bytes"] = bytes;
  j["seconds"] = static_cast<double>(took.count()) / 1000.0;
  if (!error.empty()) j["detail"] = error;
  events_->emit("state_fetched", members(j));
}

void OperatorView::signal(int signo, bool preemption) {
  node_.state = "stopping";
  if (!preemption) node_.health = "stopping: received " + signal_name(signo);
  json j = event_fields(id_, node_);
  j["signal"] = signal_name(signo);
  events_->emit(preemption ? "preemption" : "signal", members(j));
  changed();
}

void OperatorView::store_lost(const std::string& why) {
  node_.health = "lost the rendezvous store: " + why;
  json j = event_fields(id_, node_);
  j["detail"] = why;
  events_->emit("store_lost", members(j));
  changed();
}

void OperatorView::stopped(int exit_code) {
  node_.state = exit_code == 0 ? "succeeded" : "failed";
  if (exit_code != 0 && node_.health.empty()) node_.health = "the job ended with exit code " + std::to_string(exit_code);
  json j = event_fields(id_, node_);
  j["restart_count"] = node_.restart_count;
  j["exit_code"] = exit_code;
  events_->emit("stop", members(j));
  changed();
}

NodeStatus OperatorView::status() const {
  NodeStatus s = node_;
  s.updated_unix = unix_now();
  if (heartbeats_) {
    const std::int64_t now = monotonic_ns();
    for (auto& w : s.workers) {
      if (w.state != "running") continue;
      if (auto beat = heartbeats_(w.local_rank); beat && beat->monotonic_ns != 0) {
        w.heartbeat_age_s = static_cast<double>(now - beat->monotonic_ns) / 1e9;
        w.step = beat->step;
      }
    }
  }
  return s;
}

void OperatorView::changed() const {
  if (publish_) publish_(status().to_json(), node_.node_rank == 0);
}

void OperatorView::share() const {
  if (publish_ && node_.state == "running") changed();
}

std::string OperatorView::metrics_text() const {
  const NodeStatus s = status();
  double running = 0;
  for (const auto& w : s.workers) running += w.state == "running";
  MetricFamily failures{"crun_worker_failures_total", "counter",
                        "Root-cause worker failures on this node, by reason: exit (non-zero code), signal, hang (no "
                        "heartbeat), timer (torch's file timer).",
                        {}};
  for (const auto& [reason, n] : failures_) failures.samples.emplace_back(labels({{"reason", reason_label(reason)}}), static_cast<double>(n));
  MetricFamily beat_age{"crun_worker_heartbeat_age_seconds", "gauge", "Seconds since each running worker's last heartbeat.", {}};
  MetricFamily step{"crun_worker_step", "gauge", "The step of each running worker's last heartbeat.", {}};
  for (const auto& w : s.workers) {
    const std::string l = labels({{"local_rank", std::to_string(w.local_rank)}, {"rank", std::to_string(w.rank)}});
    if (w.heartbeat_age_s) beat_age.samples.emplace_back(l, *w.heartbeat_age_s);
    if (w.step) step.samples.emplace_back(l, static_cast<double>(*w.step));
  }
  MetricFamily node_checks{"crun_node_check_failures_total", "counter", "Unhealthy node-check verdicts on this node, by check.", {}};
  for (const auto& [check, n] : node_check_failures_) node_checks.samples.emplace_back(labels({{"check", check}}), static_cast<double>(n));
  const ProcessStats p = self_stats();
  auto one = [](double v) { return std::vector<std::pair<std::string, double>>{{"", v}}; };
  return exposition_text({
      {"crun_info", "gauge", "The job this agent runs, in its labels; always 1.",
       {{labels({{"run_id", s.run_id}, {"role", s.role}, {"hostname", s.hostname}, {"node_rank", std::to_string(s.node_rank)}}), 1}}},
      {"crun_healthy", "gauge", "1 while the agent is healthy (GET /healthz answers 200), else 0.", one(s.health.empty() ? 1 : 0)},
      {"crun_restarts_total", "counter", "Restarts of the worker group so far (TORCHELASTIC_RESTART_COUNT).", one(s.restart_count)},
      {"crun_max_restarts", "gauge", "Restarts allowed (--max-restarts).", one(s.max_restarts)},
      failures,
      {"crun_worker_starts_total", "counter", "Worker processes this agent has started.", one(static_cast<double>(worker_starts_))},
      {"crun_workers_running", "gauge", "Workers of this node running now.", one(running)},
      {"crun_workers", "gauge", "Workers per node (--nproc-per-node).", one(id_.nproc_per_node)},
      {"crun_rendezvous_round", "gauge", "The rendezvous round the workers belong to (-1 before the first).", one(s.rendezvous_round)},
      {"crun_nodes", "gauge", "Nodes in the current round.", one(s.nodes)},
      {"crun_node_rank", "gauge", "This node's rank in the current round (GROUP_RANK).", one(s.node_rank)},
      {"crun_world_size", "gauge", "Workers in the whole job (WORLD_SIZE).", one(s.world_size)},
      {"crun_nodes_excluded", "gauge", "Nodes the coordinator keeps out of the job now (node rank 0's view).",
       one(static_cast<double>(s.excluded_nodes.size()))},
      {"crun_node_exclusions_total", "counter", "Exclusions of nodes in the job so far (node rank 0's view).",
       one(s.exclusions_total)},
      {"crun_last_failure_timestamp_seconds", "gauge",
       "When the newest root cause this agent knows of failed, in seconds since the epoch (0: none yet).",
       one(last_failure_unix_.value_or(0))},
      beat_age,
      step,
      {"crun_node_healthy", "gauge", "1 unless this node's newest node check failed, else 0.", one(s.node_check.empty() ? 1 : 0)},
      node_checks,
      {"process_cpu_seconds_total", "counter", "CPU time the agent itself has used (user and system), in seconds.", one(p.cpu_seconds)},
      {"process_resident_memory_bytes", "gauge", "The agent's resident memory, in bytes.", one(p.resident_bytes)},
      {"process_open_fds", "gauge", "Descriptors the agent has open.", one(p.open_fds)},
      {"process_max_fds", "gauge", "The agent's open-files limit.", one(p.max_fds)},
      {"process_start_time_seconds", "gauge", "When the agent started, in seconds since the epoch.", one(started_unix_)},
  });
}

HttpReply OperatorView::serve(const std::string& path) const {
  HttpReply r;
  if (path == "/healthz") {
    r.status = node_.health.empty() ? 200 : 503;
    r.body = (node_.health.empty() ? "ok: " + node_.state : node_.health) + "\n";
  } else if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_text();
  } else if (path == "/status") {
    r.content_type = "application/json";
    r.body = job_json(status(), job_ && node_.node_rank == 0 ? job_() : std::vector<std::string>{}) + "\n";
  } else if (path == "/" || path == "/index.html") {
    r.content_type = "text/html; charset=utf-8";
    r.body = status_page_html();
  } else {
    r.status = 404;
    r.body = "not found: " + path + " (try /healthz, /metrics, /status or /)\n";
  }
  return r;
}

void OperatorView::self_excluded(const std::string& reason, double until_unix) {
  node_.state = "excluded";
  node_.excluded = reason;
  node_.workers.clear();
  ExcludedNodeStatus self;
  self.node_id = node_.node_id;
  self.hostname = id_.hostname;
  self.addr = node_.addr;
  self.reason = reason;
  self.until_unix = until_unix;
  json j = event_fields(id_, node_);
  j["node_id"] = node_.node_id;
  j["detail"] = reason;
  j["until_unix"] = until_unix;
  j["self"] = true;
  events_->emit("node_excluded", members(j));
  changed();
}

void OperatorView::excluded_nodes(std::vector<ExcludedNodeStatus> nodes, int total) {
  if (node_.node_rank == 0) {
    for (const auto& n : nodes) {
      if (!announced_exclusions_.emplace(n.node_id, n.times).second) continue;
      json j = event_fields(id_, node_);
      j["node_id"] = n.node_id;
      j["excluded_host"] = n.hostname;
      j["addr"] = n.addr;
      j["detail"] = n.reason;
      j["times"] = n.times;
      j["until_unix"] = n.until_unix;
      events_->emit("node_excluded", members(j));
    }
  }
  node_.excluded_nodes = std::move(nodes);
  node_.exclusions_total = total;
  changed();
}

void OperatorView::worker_request(int rank, int local_rank, int pid, const std::string& request) {
  if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < node_.workers.size()) {
    node_.workers[static_cast<std::size_t>(local_rank)].request = request;
  }
  json j = worker_fields(id_, node_, local_rank, pid);
  j["rank"] = rank;
  const auto space = request.find(' ');
  j["request"] = request.substr(0, space);
  j["reason"] = space == std::string::npos ? std::string() : request.substr(space + 1);
  events_->emit("worker_request", members(j));
  changed();
}

std::string OperatorView::requested_health(int rank, const std::string& host, const std::string& request) {
  return "failed: rank " + std::to_string(rank) + " on " + host + " asked for it (CRUN_CONTROL_FILE): " + request;
}

void OperatorView::node_check(const NodeCheckResult& result) {
  if (result.healthy()) {
    if (node_.node_check.empty()) return;  // nothing changed: no event per restart
    node_.node_check.clear();
    if (node_.state == "unhealthy") node_.state = "rendezvous";
    events_->emit("node_healthy", members(event_fields(id_, node_)));
    changed();
    return;
  }
  ++node_check_failures_[result.check];
  node_.node_check = result.check + ": " + result.reason;
  node_.state = "unhealthy";  // it does not join: in no round until its checks pass
  node_.node_rank = -1;
  json j = event_fields(id_, node_);
  j["check"] = result.check;
  j["reason"] = result.reason;
  events_->emit("node_check_failed", members(j));
  changed();
}

void OperatorView::precheck(const std::string& line, const std::string& verdict) {
  node_.precheck = line;
  json j = event_fields(id_, node_);
  j["line"] = line;
  if (json v = json::parse(verdict, nullptr, false); v.is_object()) j["verdict"] = std::move(v);
  events_->emit("precheck", members(j));
  changed();
}

void OperatorView::heartbeat_timeout(const std::string& text) {
  if (node_.heartbeat_timeout == text) return;
  node_.heartbeat_timeout = text;
  changed();
}

void OperatorView::stacks_captured(StackGroups groups) {
  node_.stack_groups = std::move(groups);
  changed();
}

void OperatorView::capture_ended(const std::vector<int>& ranks, const std::vector<int>& timed_out,
                                 std::chrono::milliseconds took) {
  json j = event_fields(id_, node_);
  j["restart_count"] = node_.restart_count;
  j["ranks"] = ranks;
  j["timed_out"] = timed_out;
  j["ms"] = took.count();
  events_->emit("stacks_captured", members(j));
}

void OperatorView::stacks_gathered(const std::vector<int>& nodes_in, const std::vector<int>& nodes_missing,
                                   std::chrono::milliseconds waited, StackGroups merged) {
  json j = event_fields(id_, node_);
  j["restart_count"] = merged.empty() ? node_.restart_count : merged.attempt;
  j["nodes_in"] = nodes_in;
  j["nodes_missing"] = nodes_missing;
  j["ranks"] = merged.rank_count();
  j["ms"] = waited.count();
  events_->emit("stacks_gathered", members(j));
  if (!merged.empty()) node_.stack_groups = std::move(merged);
  changed();
}

}  // namespace crun
