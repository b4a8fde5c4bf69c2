#include "rendezvous/rendezvous_records.h"

#include <nlohmann/json.hpp>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace crun {

using nlohmann::json;

// Records may carry worker output, which need not be UTF-8: invalid bytes become U+FFFD instead
// of an exception (dump(...replace)).

namespace {
json parse(const std::string& text, const char* what) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) throw std::invalid_argument(std::string(what) + " record is not a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("malformed ") + what + " record: " + e.what());
  }
}

template <typename T>
T field(const json& j, const char* name, const char* what) {
  auto it = j.find(name);
  if (it == j.end()) throw std::invalid_argument(std::string(what) + " record lacks '" + name + "'");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // An integer in T's range: nlohmann would convert a float or a bigger number silently (and a
    // float beyond T's range is undefined behaviour).
    if (it->is_number_unsigned()) {
      if (std::in_range<T>(it->get<std::uint64_t>())) return static_cast<T>(it->get<std::uint64_t>());
    } else if (it->is_number_integer()) {
      if (std::in_range<T>(it->get<std::int64_t>())) return static_cast<T>(it->get<std::int64_t>());
    }
    throw std::invalid_argument(std::string(what) + " record has a bad '" + name + "'");
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw std::invalid_argument(std::string(what) + " record has a bad '" + name + "'");
  }
}

json excluded_json(const std::vector<ExcludedNode>& nodes) {
  json list = json::array();
  for (const auto& n : nodes) {
    list.push_back(json{{"node_id", n.node_id}, {"hostname", n.hostname}, {"addr", n.addr}, {"reason", n.reason},
                        {"times", n.times}, {"until_unix_ms", n.until_unix_ms}});
  }
  return list;
}

std::vector<ExcludedNode> excluded_from_json(const json& list, const char* what) {
  if (!list.is_array()) throw std::invalid_argument(std::string(what) + " record has a bad 'excluded'");
  std::vector<ExcludedNode> out;
  for (const auto& j : list) {
    if (!j.is_object()) throw std::invalid_argument(std::string(what) + " record has a bad 'excluded'");
    ExcludedNode n;
    n.node_id = field<std::string>(j, "node_id", what);
    n.hostname = field<std::string>(j, "hostname", what);
    n.addr = field<std::string>(j, "addr", what);
    n.reason = field<std::string>(j, "reason", what);
    n.times = field<int>(j, "times", what);
    n.until_unix_ms = field<std::int64_t>(j, "until_unix_ms", what);
    out.push_back(std::move(n));
  }
  return out;
}
}  // namespace

std::string NodeRecord::to_json() const {
  return json{{"node_id", node_id}, {"hostname", hostname}, {"addr", addr}, {"free_port", free_port},
              {"rank_hint", rank_hint}, {"seq", seq}, {"nproc", nproc}, {"role", role},
              {"max_restarts", max_restarts}, {"min_nodes", min_nodes}, {"max_nodes", max_nodes},
              {"program", program}, {"state_port", state_port}, {"exclude_after", exclude_after},
              {"exclude_cooldown_ms", exclude_cooldown_ms}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

NodeRecord NodeRecord::from_json(const std::string& text) {
  json j = parse(text, "join");
  NodeRecord r;
  r.node_id = field<std::string>(j, "node_id", "join");
  r.hostname = field<std::string>(j, "hostname", "join");
  r.addr = field<std::string>(j, "addr", "join");
  r.free_port = field<std::uint16_t>(j, "free_port", "join");
  r.rank_hint = field<int>(j, "rank_hint", "join");
  r.seq = field<int>(j, "seq", "join");
  r.nproc = field<int>(j, "nproc", "join");
  r.role = field<std::string>(j, "role", "join");
  r.max_restarts = field<int>(j, "max_restarts", "join");
  r.min_nodes = field<int>(j, "min_nodes", "join");
  r.max_nodes = field<int>(j, "max_nodes", "join");
  r.program = field<std::string>(j, "program", "join");
  if (j.contains("state_port")) r.state_port = field<std::uint16_t>(j, "state_port", "join");
  if (j.contains("exclude_after")) r.exclude_after = field<int>(j, "exclude_after", "join");
  if (j.contains("exclude_cooldown_ms")) r.exclude_cooldown_ms = field<std::int64_t>(j, "exclude_cooldown_ms", "join");
  return r;
}

std::string NodeRecord::mismatch(const NodeRecord& o) const {
  std::string out;
  auto add = [&](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    if (!out.empty()) out += ", ";
    out += std::string(name) + " " + a + " vs " + b;
  };
  add("nproc", std::to_string(nproc), std::to_string(o.nproc));
  add("role", role, o.role);
  add("max-restarts", std::to_string(max_restarts), std::to_string(o.max_restarts));
  add("nnodes", std::to_string(min_nodes) + ":" + std::to_string(max_nodes),
      std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes));
  add("program", program, o.program);
  add("exclude-after", std::to_string(exclude_after), std::to_string(o.exclude_after));
  add("exclude-cooldown", std::to_string(exclude_cooldown_ms / 1000) + " s", std::to_string(o.exclude_cooldown_ms / 1000) + " s");
  return out;
}

std::string RoundAnswer::to_json() const {
  json j{{"error", error}, {"closed", closed}, {"round", round}, {"restart_count", restart_count},
         {"node_rank", node_rank}, {"nnodes", nnodes}, {"master_addr", master_addr}, {"master_port", master_port}};
  if (!state_endpoints.empty()) j["state_endpoints"] = state_endpoints;
  if (excluded_for_ms > 0) {
    j["excluded_for_ms"] = excluded_for_ms;
    j["excluded_reason"] = excluded_reason;
  }
  if (!excluded.empty()) j["excluded"] = excluded_json(excluded);
  if (exclusions_total > 0) j["exclusions_total"] = exclusions_total;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string state_endpoint(const NodeRecord& node) {
  if (node.state_port == 0 || node.addr.empty()) return "";
  const bool v6 = node.addr.find(':') != std::string::npos;
  return (v6 ? "[" + node.addr + "]" : node.addr) + ":" + std::to_string(node.state_port);
}

std::vector<std::string> state_endpoints(const std::vector<const NodeRecord*>& nodes) {
  std::vector<std::string> out;
  bool any = false;
  for (const NodeRecord* n : nodes) {
    out.push_back(state_endpoint(*n));
    any = any || !out.back().empty();
  }
  if (!any) out.clear();
  return out;
}

RoundAnswer RoundAnswer::from_json(const std::string& text) {
  json j = parse(text, "answer");
  RoundAnswer a;
  a.error = field<std::string>(j, "error", "answer");
  a.closed = field<bool>(j, "closed", "answer");
  a.round = field<int>(j, "round", "answer");
  a.restart_count = field<int>(j, "restart_count", "answer");
  a.node_rank = field<int>(j, "node_rank", "answer");
  a.nnodes = field<int>(j, "nnodes", "answer");
  a.master_addr = field<std::string>(j, "master_addr", "answer");
  a.master_port = field<std::uint16_t>(j, "master_port", "answer");
  if (j.contains("state_endpoints")) a.state_endpoints = field<std::vector<std::string>>(j, "state_endpoints", "answer");
  if (j.contains("excluded_for_ms")) {
    a.excluded_for_ms = field<std::int64_t>(j, "excluded_for_ms", "answer");
    a.excluded_reason = field<std::string>(j, "excluded_reason", "answer");
  }
  if (j.contains("excluded")) a.excluded = excluded_from_json(j.at("excluded"), "answer");
  if (j.contains("exclusions_total")) a.exclusions_total = field<int>(j, "exclusions_total", "answer");
  return a;
}

std::string RoundOutcome::to_json() const {
  json j{{"succeeded", succeeded}, {"exit_code", exit_code}, {"wall_time_us", wall_time_us}, {"report", report}};
  if (highest_step) j["highest_step"] = *highest_step;
  if (!exclude_request.empty()) j["exclude_request"] = exclude_request;
  if (!stop_request.empty()) j["stop_request"] = stop_request;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

RoundOutcome RoundOutcome::from_json(const std::string& text) {
  json j = parse(text, "outcome");
  RoundOutcome o;
  o.succeeded = field<bool>(j, "succeeded", "outcome");
  o.exit_code = field<int>(j, "exit_code", "outcome");
  o.wall_time_us = field<std::int64_t>(j, "wall_time_us", "outcome");
  o.report = field<std::string>(j, "report", "outcome");
  if (j.contains("highest_step")) o.highest_step = field<std::int64_t>(j, "highest_step", "outcome");
  if (j.contains("exclude_request")) o.exclude_request = field<std::string>(j, "exclude_request", "outcome");
  if (j.contains("stop_request")) o.stop_request = field<std::string>(j, "stop_request", "outcome");
  return o;
}

std::string ControlEvent::to_json() const {
  return json{{"kind", kind == Kind::kStop ? "stop" : "closed"}, {"round", round}, {"restart_count", restart_count},
              {"failure", failure}, {"exit_code", exit_code}, {"detail", detail}, {"origin_node", origin_node},
              {"report", report}, {"excluded", excluded}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

ControlEvent ControlEvent::from_json(const std::string& text) {
  json j = parse(text, "control");
  ControlEvent e;
  auto kind = field<std::string>(j, "kind", "control");
  if (kind != "stop" && kind != "closed") throw std::invalid_argument("control record has an unknown kind '" + kind + "'");
  e.kind = kind == "stop" ? Kind::kStop : Kind::kClosed;
  e.round = field<int>(j, "round", "control");
  e.restart_count = field<int>(j, "restart_count", "control");
  e.failure = field<bool>(j, "failure", "control");
  e.exit_code = field<int>(j, "exit_code", "control");
  e.detail = field<std::string>(j, "detail", "control");
  e.origin_node = field<std::string>(j, "origin_node", "control");
  e.report = field<std::string>(j, "report", "control");
  if (j.contains("excluded")) e.excluded = field<std::string>(j, "excluded", "control");
  return e;
}

namespace {
const char* phase_name(EtcdRoundRecord::Phase p) {
  switch (p) {
    case EtcdRoundRecord::Phase::kForming: return "forming";
    case EtcdRoundRecord::Phase::kRunning: return "running";
    case EtcdRoundRecord::Phase::kClosed: return "closed";
  }
  return "?";
}
}  // namespace

std::string EtcdRoundRecord::to_json() const {
  json j{{"phase", phase_name(phase)}, {"round", round}, {"restart_count", restart_count}, {"expected", expected},
         {"participants", participants}, {"master_addr", master_addr}, {"master_port", master_port},
         {"reference", reference}, {"no_progress_streak", no_progress_streak}};
  if (best_step) j["best_step"] = *best_step;
  if (cause) j["cause"] = cause->to_json();
  if (!state_endpoints.empty()) j["state_endpoints"] = state_endpoints;
  if (!previous.empty()) j["previous"] = previous;
  if (!excluded.empty()) j["excluded"] = excluded_json(excluded);
  if (!root_causes.empty()) j["root_causes"] = root_causes;
  if (exclusions_total > 0) j["exclusions_total"] = exclusions_total;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

EtcdRoundRecord EtcdRoundRecord::from_json(const std::string& text) {
  json j = parse(text, "round");
  EtcdRoundRecord r;
  const auto phase = field<std::string>(j, "phase", "round");
  if (phase == "forming") r.phase = Phase::kForming;
  else if (phase == "running") r.phase = Phase::kRunning;
  else if (phase == "closed") r.phase = Phase::kClosed;
  else throw std::invalid_argument("round record has an unknown phase '" + phase + "'");
  r.round = field<int>(j, "round", "round");
  r.restart_count = field<int>(j, "restart_count", "round");
  r.expected = field<std::vector<std::string>>(j, "expected", "round");
  r.participants = field<std::vector<std::string>>(j, "participants", "round");
  r.master_addr = field<std::string>(j, "master_addr", "round");
  r.master_port = field<std::uint16_t>(j, "master_port", "round");
  r.reference = field<std::string>(j, "reference", "round");
  r.no_progress_streak = field<int>(j, "no_progress_streak", "round");
  if (j.contains("best_step")) r.best_step = field<std::int64_t>(j, "best_step", "round");
  if (j.contains("cause")) r.cause = ControlEvent::from_json(field<std::string>(j, "cause", "round"));
  if (j.contains("state_endpoints")) r.state_endpoints = field<std::vector<std::string>>(j, "state_endpoints", "round");
  if (j.contains("previous")) r.previous = field<std::vector<std::string>>(j, "previous", "round");
  if (j.contains("excluded")) r.excluded = excluded_from_json(j.at("excluded"), "round");
  if (j.contains("root_causes")) {
    const json& counts = j.at("root_causes");
    if (!counts.is_object()) throw std::invalid_argument("round record has a bad 'root_causes'");
    for (const auto& [node, n] : counts.items()) {
      const int count = field<int>(json{{"count", n}}, "count", "round");  // an integer in range, as every count
      if (count < 0) throw std::invalid_argument("round record has a negative count");
      r.root_causes[node] = count;
    }
  }
  if (j.contains("exclusions_total")) r.exclusions_total = field<int>(j, "exclusions_total", "round");
  if (r.round < 0 || r.restart_count < 0 || r.no_progress_streak < 0) throw std::invalid_argument("round record has a negative count");
  if (r.phase == Phase::kRunning && r.participants.empty()) throw std::invalid_argument("round record runs no node");
  return r;
}

std::string EtcdJoinRecord::to_json() const {
  return json{{"round", round}, {"node", node.to_json()}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

EtcdJoinRecord EtcdJoinRecord::from_json(const std::string& text) {
  json j = parse(text, "join");
  EtcdJoinRecord r;
  r.round = field<int>(j, "round", "join");
  r.node = NodeRecord::from_json(field<std::string>(j, "node", "join"));
  return r;
}

std::string EtcdReportRecord::to_json() const {
  return json{{"round", round}, {"outcome", outcome.to_json()}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

EtcdReportRecord EtcdReportRecord::from_json(const std::string& text) {
  json j = parse(text, "report");
  EtcdReportRecord r;
  r.round = field<int>(j, "round", "report");
  r.outcome = RoundOutcome::from_json(field<std::string>(j, "outcome", "report"));
  return r;
}

}  // namespace crun
