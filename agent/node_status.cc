#include "agent/node_status.h"

#include <algorithm>
#include <limits>
#include <map>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "base/rounding.h"

namespace crun {

namespace {

using nlohmann::json;

json worker_json(const WorkerStatus& w) {
  json j = {{"local_rank", w.local_rank}, {"rank", w.rank}, {"pid", w.pid}, {"state", w.state},
            {"exit", w.exit},             {"restarts", w.restarts}};
  j["heartbeat_age_s"] = w.heartbeat_age_s ? json(round_to_millis(*w.heartbeat_age_s)) : json(nullptr);
  j["step"] = w.step ? json(*w.step) : json(nullptr);
  if (!w.request.empty()) j["request"] = w.request;
  return j;
}

json excluded_json(const std::vector<ExcludedNodeStatus>& nodes) {
  json list = json::array();
  for (const auto& n : nodes) {
    list.push_back({{"node_id", n.node_id}, {"hostname", n.hostname}, {"addr", n.addr}, {"reason", n.reason},
                    {"times", n.times}, {"until_unix", round_to_millis(n.until_unix)}});
  }
  return list;
}

json stack_groups_json(const StackGroups& g) { return g.empty() ? json(nullptr) : json::parse(g.to_json()); }

json node_json(const NodeStatus& s) {
  json workers = json::array();
  for (const auto& w : s.workers) workers.push_back(worker_json(w));
  json failure = nullptr;
  if (!s.last_failure.empty()) failure = json::parse(s.last_failure, nullptr, false);
  if (failure.is_discarded()) failure = nullptr;
  return {{"run_id", s.run_id},
          {"role", s.role},
          {"hostname", s.hostname},
          {"node_id", s.node_id},
          {"addr", s.addr},
          {"node_rank", s.node_rank},
          {"nodes", s.nodes},
          {"world_size", s.world_size},
          {"rendezvous_round", s.rendezvous_round},
          {"restart_count", s.restart_count},
          {"max_restarts", s.max_restarts},
          {"state", s.state},
          {"health", s.health},
          {"workers", std::move(workers)},
          {"last_failure", std::move(failure)},
          {"updated_unix", round_to_millis(s.updated_unix)},
          {"excluded", s.excluded},
          {"excluded_nodes", excluded_json(s.excluded_nodes)},
          {"exclusions_total", s.exclusions_total},
          {"node_check", s.node_check},
          {"precheck", s.precheck},
          {"heartbeat_timeout", s.heartbeat_timeout},
          {"stack_groups", stack_groups_json(s.stack_groups)}};
}

template <typename T>
T field(const json& j, const char* name) {
  const json& v = j.at(name);
  if constexpr (std::is_integral_v<T>) {
    // Integers only, in range: get<int>() of 1e300 would be undefined behaviour.
    if (!v.is_number_integer()) throw json::type_error::create(302, std::string(name) + " is not an integer", &v);
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                               : (v.get<std::int64_t>() < std::numeric_limits<T>::min() ||
                                  v.get<std::int64_t>() > std::numeric_limits<T>::max())) {
      throw json::type_error::create(302, std::string(name) + " is out of range", &v);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw json::type_error::create(302, std::string(name) + " is not a number", &v);
  }
  return v.get<T>();
}

std::optional<NodeStatus> parse_node(const json& j) {
  try {
    NodeStatus s;
    s.run_id = field<std::string>(j, "run_id");
    s.role = field<std::string>(j, "role");
    s.hostname = field<std::string>(j, "hostname");
    s.node_id = field<std::string>(j, "node_id");
    s.addr = field<std::string>(j, "addr");
    s.node_rank = field<int>(j, "node_rank");
    s.nodes = field<int>(j, "nodes");
    s.world_size = field<int>(j, "world_size");
    s.rendezvous_round = field<int>(j, "rendezvous_round");
    s.restart_count = field<int>(j, "restart_count");
    s.max_restarts = field<int>(j, "max_restarts");
    s.state = field<std::string>(j, "state");
    s.health = field<std::string>(j, "health");
    for (const auto& wj : j.at("workers")) {
      WorkerStatus w;
      w.local_rank = field<int>(wj, "local_rank");
      w.rank = field<int>(wj, "rank");
      w.pid = field<int>(wj, "pid");
      w.state = field<std::string>(wj, "state");
      w.exit = field<std::string>(wj, "exit");
      w.restarts = field<int>(wj, "restarts");
      if (!wj.at("heartbeat_age_s").is_null()) w.heartbeat_age_s = field<double>(wj, "heartbeat_age_s");
      if (!wj.at("step").is_null()) w.step = field<std::int64_t>(wj, "step");
      if (wj.contains("request")) w.request = field<std::string>(wj, "request");
      s.workers.push_back(std::move(w));
    }
    if (const auto& f = j.at("last_failure"); !f.is_null()) {
      if (!f.is_object()) return std::nullopt;
      s.last_failure = f.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    s.updated_unix = field<double>(j, "updated_unix");
    if (j.contains("excluded")) s.excluded = field<std::string>(j, "excluded");
    if (j.contains("precheck")) s.precheck = field<std::string>(j, "precheck");
    if (j.contains("exclusions_total")) s.exclusions_total = field<int>(j, "exclusions_total");
    if (j.contains("excluded_nodes")) {
      for (const auto& ej : j.at("excluded_nodes")) {
        ExcludedNodeStatus e;
        e.node_id = field<std::string>(ej, "node_id");
        e.hostname = field<std::string>(ej, "hostname");
        e.addr = field<std::string>(ej, "addr");
        e.reason = field<std::string>(ej, "reason");
        e.times = field<int>(ej, "times");
        e.until_unix = field<double>(ej, "until_unix");
        s.excluded_nodes.push_back(std::move(e));
      }
    }
    if (j.contains("node_check")) s.node_check = field<std::string>(j, "node_check");
    if (j.contains("heartbeat_timeout")) s.heartbeat_timeout = field<std::string>(j, "heartbeat_timeout");
    if (const auto g = j.find("stack_groups"); g != j.end() && !g->is_null()) {
      auto groups = StackGroups::from_json(g->dump());
      if (!groups) return std::nullopt;
      s.stack_groups = std::move(*groups);
    }
    return s;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string NodeStatus::to_json() const { return node_json(*this).dump(-1, ' ', false, json::error_handler_t::replace); }

std::optional<NodeStatus> NodeStatus::from_json(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return parse_node(j);
}

std::string job_json(const NodeStatus& self, const std::vector<std::string>& published) {
  // By node rank; the newest record of a rank wins (a node that left and one that took its rank).
  std::map<int, NodeStatus> nodes;
  std::vector<NodeStatus> outside;  // node rank -1: in no round (its node checks fail), each listed
  for (const auto& text : published) {
    auto s = NodeStatus::from_json(text);
    if (!s || s->node_id == self.node_id || s->run_id != self.run_id) continue;
    if (s->node_rank < 0) {
      outside.push_back(std::move(*s));
      continue;
    }
    auto [it, fresh] = nodes.emplace(s->node_rank, *s);
    if (!fresh && it->second.updated_unix < s->updated_unix) it->second = std::move(*s);
  }
  if (self.node_rank < 0) {
    outside.push_back(self);
  } else {
    nodes[self.node_rank] = self;
  }
  json list = json::array();
  int workers = 0;
  int running = 0;
  for (const auto& [rank, s] : nodes) {
    list.push_back(node_json(s));
    workers += static_cast<int>(s.workers.size());
    running += static_cast<int>(std::count_if(s.workers.begin(), s.workers.end(),
                                              [](const WorkerStatus& w) { return w.state == "running"; }));
  }
  for (const auto& s : outside) list.push_back(node_json(s));
  std::vector<StackGroups> stacks;
  for (const auto& [rank, s] : nodes) {
    if (!s.stack_groups.empty()) stacks.push_back(s.stack_groups);
  }
  json job = {{"run_id", self.run_id},
              {"nodes_expected", self.nodes},
              {"nodes_seen", static_cast<int>(nodes.size())},
              {"nodes_outside", static_cast<int>(outside.size())},
              {"workers", workers},
              {"workers_running", running},
              {"restart_count", self.restart_count},
              {"max_restarts", self.max_restarts},
              {"nodes", std::move(list)},
              {"stack_groups", stack_groups_json(merge_stack_groups(stacks))}};
  return json{{"node", node_json(self)}, {"job", std::move(job)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

StackGroups merged_stack_groups(const std::vector<std::string>& published, const std::string& run_id, int attempt,
                                std::vector<StackGroups> parts) {
  for (const auto& text : published) {
    if (text.find("\"stack_groups\":{") == std::string::npos) continue;  // none: not worth parsing
    auto s = NodeStatus::from_json(text);
    if (s && s->run_id == run_id) parts.push_back(std::move(s->stack_groups));
  }
  std::erase_if(parts, [attempt](const StackGroups& g) { return g.empty() || g.attempt != attempt; });
  return merge_stack_groups(parts);
}

}  // namespace crun
