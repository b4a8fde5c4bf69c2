#include "agent/worker_env.h"

#include <unistd.h>

#include <string_view>

extern char** environ;

namespace crun {
namespace {
std::string_view key_of(std::string_view kv) {
  const auto eq = kv.find('=');
  return kv.substr(0, eq == std::string_view::npos ? kv.size() : eq);
}
}  // namespace

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

EnvironmentList worker_variables(const std::vector<std::string>& base, const RoundInfo& place,
                                 const WorkerIdentity& who) {
  bool has_omp = false;
  bool has_nccl = false;
  bool has_legacy_nccl = false;
  bool has_pg_timeout = false;
  std::optional<std::string> handling, legacy_handling, blocking, legacy_blocking;
  for (const auto& kv : base) {
    const auto key = key_of(kv);
    const auto value = [&] { return std::string(kv.substr(std::min(kv.size(), key.size() + 1))); };
    has_omp = has_omp || key == "OMP_NUM_THREADS";
    has_nccl = has_nccl || key == "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    has_legacy_nccl = has_legacy_nccl || key == "NCCL_ASYNC_ERROR_HANDLING";
    has_pg_timeout = has_pg_timeout || key == "CRUN_PG_TIMEOUT_SEC";
    if (key == "TORCH_NCCL_ASYNC_ERROR_HANDLING") handling = value();
    if (key == "NCCL_ASYNC_ERROR_HANDLING") legacy_handling = value();
    if (key == "TORCH_NCCL_BLOCKING_WAIT") blocking = value();
    if (key == "NCCL_BLOCKING_WAIT") legacy_blocking = value();
  }

  EnvironmentList updates;
  auto set = [&](const char* key, std::string value) { updates.emplace_back(key, std::move(value)); };
  const int rank = place.rank_offset + who.local_rank;
  set("LOCAL_RANK", who.visible_device ? "0" : std::to_string(who.local_rank));
  if (who.visible_device) set("CUDA_VISIBLE_DEVICES", *who.visible_device);
  set("RANK", std::to_string(rank));
  set("GROUP_RANK", std::to_string(place.group_rank));
  set("GROUP_WORLD_SIZE", std::to_string(place.group_world_size));
  set("ROLE_NAME", who.role);
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_WORLD_SIZE", std::to_string(place.world_size));
  set("LOCAL_WORLD_SIZE", std::to_string(who.local_world_size));
  set("WORLD_SIZE", std::to_string(place.world_size));
  set("MASTER_ADDR", place.master_addr);
  set("MASTER_PORT", std::to_string(place.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(place.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(who.max_restarts));
  set("TORCHELASTIC_RUN_ID", who.run_id);
  set("TORCHELASTIC_USE_AGENT_STORE", place.agent_store ? "True" : "False");
  if (!who.error_file.empty()) set("TORCHELASTIC_ERROR_FILE", who.error_file);
  if (!who.timer_file.empty()) set("TORCHELASTIC_TIMER_FILE", who.timer_file);
  if (!who.heartbeat_file.empty()) set("CRUN_HEARTBEAT_FILE", who.heartbeat_file);
  if (!who.agent_id.empty()) set("CRUN_AGENT_ID", who.agent_id);
  if (!who.state_dir.empty()) set("CRUN_STATE_DIR", who.state_dir);
  if (!who.control_file.empty()) set("CRUN_CONTROL_FILE", who.control_file);
  // torchrun sets OMP_NUM_THREADS=1 only when several workers share the node: one worker keeps
  // torch's default (all cores).
  if (!has_omp && who.local_world_size > 1) set("OMP_NUM_THREADS", "1");
  // torch >= 2.2 reads TORCH_NCCL_ASYNC_ERROR_HANDLING; torch 1.x-2.1 (and its torchrun) only
  // NCCL_ASYNC_ERROR_HANDLING. Both, so that every torch version aborts on NCCL errors.
  // A user's value under one spelling is copied to the other, so that every torch version sees it.
  if (!has_nccl) set("TORCH_NCCL_ASYNC_ERROR_HANDLING", legacy_handling.value_or("1"));
  if (!has_legacy_nccl) set("NCCL_ASYNC_ERROR_HANDLING", handling.value_or("1"));
  if (blocking && !legacy_blocking) set("NCCL_BLOCKING_WAIT", *blocking);
  if (legacy_blocking && !blocking) set("TORCH_NCCL_BLOCKING_WAIT", *legacy_blocking);
  if (!who.pg_timeout_sec.empty() && !has_pg_timeout) set("CRUN_PG_TIMEOUT_SEC", who.pg_timeout_sec);
  return updates;
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const RoundInfo& place, const WorkerIdentity& who) {
  const EnvironmentList updates = worker_variables(base, place, who);
  std::vector<std::string> env;
  env.reserve(base.size() + updates.size());
  for (const auto& kv : base) {
    const auto key = key_of(kv);
    bool replaced = false;
    for (const auto& u : updates) {
      if (u.first == key) {
        replaced = true;
        break;
      }
    }
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [key, value] : updates) {
    std::string kv(key);
    kv += '=';
    kv += value;
    env.push_back(std::move(kv));
  }
  return env;
}

}  // namespace crun
