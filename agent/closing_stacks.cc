#include "agent/closing_stacks.h"

#include <limits>
#include <nlohmann/json.hpp>

namespace crun {
namespace {
constexpr std::size_t kMaxNameBytes = 512;  // a node id or host name (a DNS name has at most 253)
}  // namespace

std::string StacksRecord::to_json() const {
  nlohmann::json j = {{"round", round},
                      {"node_rank", node_rank},
                      {"node_id", node_id},
                      {"host", host},
                      {"stack_groups", nlohmann::json::parse(groups.to_json())}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<StacksRecord> StacksRecord::from_json(std::string_view text, std::string* why) {
  const auto fail = [why](std::string reason) -> std::optional<StacksRecord> {
    if (why) *why = "stacks record: " + std::move(reason);
    return std::nullopt;
  };
  if (text.size() > 2 * kMaxJsonBytes) return fail("longer than " + std::to_string(2 * kMaxJsonBytes) + " bytes");
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
  StacksRecord r;
  for (const auto* key : {"round", "node_rank"}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<long long>() < 0 ||
        it->get<long long>() > std::numeric_limits<int>::max()) {
      return fail(std::string(key) + " is not a whole number >= 0");
    }
    (std::string_view(key) == "round" ? r.round : r.node_rank) = it->get<int>();
  }
  for (const auto* key : {"node_id", "host"}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().size() > kMaxNameBytes) {
      return fail(std::string(key) + " is not a string of at most " + std::to_string(kMaxNameBytes) + " bytes");
    }
    (std::string_view(key) == "host" ? r.host : r.node_id) = it->get<std::string>();
  }
  const auto g = j.find("stack_groups");
  if (g == j.end() || !g->is_object()) return fail("stack_groups is not an object");
  std::string groups_why;
  auto groups = StackGroups::from_json(g->dump(), &groups_why);
  if (!groups) return fail(groups_why);
  r.groups = std::move(*groups);
  return r;
}

StacksGathering::StacksGathering(int round, int attempt, int node_count, int self_rank)
    : round_(round), attempt_(attempt), node_count_(node_count) {
  in_.insert(self_rank);
}

bool StacksGathering::arrived(int node_rank, std::string_view text) {
  if (node_rank < 0 || node_rank >= node_count_ || in_.contains(node_rank)) return false;
  auto r = StacksRecord::from_json(text);
  if (!r || r->round != round_ || r->node_rank != node_rank) return false;
  in_.insert(node_rank);
  if (!r->groups.empty() && r->groups.attempt == attempt_) parts_.push_back(std::move(r->groups));
  return true;
}

std::vector<int> StacksGathering::missing() const {
  std::vector<int> out;
  for (int n = 0; n < node_count_; ++n) {
    if (!in_.contains(n)) out.push_back(n);
  }
  return out;
}

}  // namespace crun
