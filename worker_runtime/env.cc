#include "worker_runtime/env.h"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "worker_runtime/types.h"

namespace crun::rt {
namespace {

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool parse_int(const char* text, long long lo, long long hi, long long& out) {
  std::string_view s(text);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= lo && out <= hi;
}

}  // namespace

bool WorkerEnv::master_is_loopback() const {
  return master_addr.rfind("127.", 0) == 0 || master_addr == "::1" || master_addr == "localhost";
}

WorkerEnv WorkerEnv::from_environment(bool allow_single_process) {
  WorkerEnv env;
  const char* required[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> missing;
  for (const char* name : required) {
    if (get(name) == nullptr) missing.emplace_back(name);
  }
  if (missing.size() == 4 && allow_single_process) {
    env.single_process = true;
    return env;
  }
  std::string problems;
  for (auto& m : missing) problems += "  " + m + " is not set\n";
  auto read = [&](const char* name, long long lo, long long hi, long long dflt) -> long long {
    const char* v = get(name);
    if (v == nullptr) return dflt;
    long long out = 0;
    if (!parse_int(v, lo, hi, out)) {
      problems += std::string("  ") + name + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]\n";
      return dflt;
    }
    return out;
  };
  env.world_size = static_cast<int>(read("WORLD_SIZE", 1, 1 << 24, 1));
  env.rank = static_cast<int>(read("RANK", 0, env.world_size - 1, 0));
  env.local_world_size = static_cast<int>(read("LOCAL_WORLD_SIZE", 1, env.world_size, env.world_size));
  env.local_rank = static_cast<int>(read("LOCAL_RANK", 0, env.local_world_size - 1, env.rank % env.local_world_size));
  env.master_port = static_cast<std::uint16_t>(read("MASTER_PORT", 1, 65535, 0));
  env.restart_count = static_cast<int>(read("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30, 0));
  if (const char* a = get("MASTER_ADDR")) env.master_addr = a;
  if (const char* r = get("TORCHELASTIC_RUN_ID")) env.run_id = r;
  if (const char* s = get("TORCHELASTIC_USE_AGENT_STORE")) {
    std::string v(s);
    env.use_agent_store = (v == "True" || v == "true" || v == "1");
  }
  if (!problems.empty()) {
    throw InitError("crun runtime: the worker environment is incomplete (start workers with crun or torchrun, "
                    "or unset all of RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT for a single process):\n" +
                    problems);
  }
  return env;
}

}  // namespace crun::rt
