#include "agent/standby_plan.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "agent/standby_bootstrap.h"

namespace crun {

namespace {

std::string_view key_of(std::string_view kv) {
  const auto eq = kv.find('=');
  return kv.substr(0, eq == std::string_view::npos ? kv.size() : eq);
}

// `start` with every field of its round changed.
GroupStart other_start(const GroupStart& start) {
  GroupStart o = start;
  o.restart_count = start.restart_count + 1;
  RoundInfo& r = o.round;
  r.restart_count = start.round.restart_count + 1;
  r.rank_offset = start.round.rank_offset + 1;
  r.group_rank = start.round.group_rank + 1;
  r.group_world_size = start.round.group_world_size + 1;
  r.world_size = start.round.world_size + 1;
  r.master_addr = start.round.master_addr + ".other";
  r.master_port = static_cast<decltype(r.master_port)>(start.round.master_port + 1);
  r.agent_store = !start.round.agent_store;
  return o;
}

void add_field(std::string& out, const std::string& field) {
  out += field;
  out += '\0';
}

void add_words(std::string& out, const std::vector<std::string>& words) {
  add_field(out, std::to_string(words.size()));
  for (const auto& w : words) add_field(out, w);
}

}  // namespace

bool standbys_wanted(const AgentConfig& config, int restart_count) {
  if (!config.standby_workers) return false;
  return config.multi_node.has_value() || restart_count < config.max_restarts;
}

std::vector<int> standbys_to_start(const AgentConfig& config, int restart_count, const std::vector<bool>& kept) {
  std::vector<int> ranks;
  if (!standbys_wanted(config, restart_count)) return ranks;
  for (int lr = 0; lr < config.nproc_per_node; ++lr) {
    const auto i = static_cast<std::size_t>(lr);
    if (i >= kept.size() || !kept[i]) ranks.push_back(lr);
  }
  return ranks;
}

std::optional<PythonProgram> python_program(const std::vector<std::string>& argv) {
  PythonProgram p;
  std::size_t i = 1;
  for (; i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-' && argv[i] != "-m"; ++i) {
    if (argv[i].find('c') != std::string::npos && argv[i][1] != '-') return std::nullopt;  // -c, -uc: a command
    p.flags.push_back(argv[i]);
  }
  if (i < argv.size() && argv[i] == "-m") {
    p.module = true;
    ++i;
  }
  if (i >= argv.size() || argv[i].empty()) return std::nullopt;
  p.target = argv[i];
  p.args.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
  return p;
}

std::vector<std::string> per_round_keys(const AgentConfig& config, const RunDirectory& run_dir, const GroupStart& start,
                                        int local_rank) {
  const auto a = plan_worker_launch(config, run_dir, start, local_rank).env;
  const auto b = plan_worker_launch(config, run_dir, other_start(start), local_rank).env;
  std::map<std::string, std::string, std::less<>> in_b;
  for (const auto& kv : b) in_b.emplace(std::string(key_of(kv)), kv);
  std::vector<std::string> keys;
  for (const auto& kv : a) {
    const auto key = key_of(kv);
    const auto other = in_b.find(key);
    if (other == in_b.end() || other->second != kv) keys.emplace_back(key);
  }
  for (const auto& entry : in_b) {  // set in the other start only
    const std::string& key = entry.first;
    if (std::none_of(a.begin(), a.end(), [&](const std::string& x) { return key_of(x) == key; })) keys.push_back(key);
  }
  return keys;
}

std::optional<WorkerLaunchPlan> plan_standby_launch(const AgentConfig& config, const RunDirectory& run_dir,
                                                    const GroupStart& start, int local_rank) {
  WorkerLaunchPlan p = plan_worker_launch(config, run_dir, start, local_rank);
  const auto program = python_program(p.argv);
  if (!program) return std::nullopt;
  const auto per_round = per_round_keys(config, run_dir, start, local_rank);
  std::erase_if(p.env, [&](const std::string& kv) {
    return std::find(per_round.begin(), per_round.end(), key_of(kv)) != per_round.end();
  });
  std::string preload;
  for (const auto& m : config.standby_preload) preload += (preload.empty() ? "" : ",") + m;
  std::vector<std::string> argv = {p.argv[0]};
  argv.insert(argv.end(), program->flags.begin(), program->flags.end());
  argv.insert(argv.end(), {"-c", standby_bootstrap_source(), std::to_string(local_rank), preload,
                           program->module ? "module" : "script", program->target});
  p.argv = std::move(argv);
  p.error_file.clear();
  p.heartbeat_file.clear();
  return p;
}

std::string standby_misfit(const WorkerLaunchPlan& standby, const WorkerLaunchPlan& worker) {
  const auto w = python_program(worker.argv);
  if (!w) return "the program is not a Python script or module";
  // The standby's argv: [interpreter, flags..., -c, bootstrap, LOCAL_RANK, PRELOAD, KIND, TARGET].
  const auto& a = standby.argv;
  if (a.size() < 7 || a[a.size() - 6] != "-c") return "it was not planned as a standby";
  if (standby.program != worker.program || a[0] != worker.argv[0]) return "the interpreter changed";
  if (std::vector<std::string>(a.begin() + 1, a.end() - 6) != w->flags) return "the interpreter's flags changed";
  if (a[a.size() - 2] != (w->module ? "module" : "script") || a.back() != w->target) return "the program changed";
  if (standby.cpus != worker.cpus) return "the CPU binding changed";
  return "";
}

std::string standby_message(const WorkerLaunchPlan& worker) {
  const auto w = python_program(worker.argv);
  std::string out;
  add_field(out, "crun-standby-1");
  add_field(out, w && w->module ? "module" : "script");
  add_field(out, w ? w->target : std::string());
  add_words(out, w ? w->args : std::vector<std::string>());
  add_words(out, worker.argv);
  add_words(out, worker.env);
  return out;
}

}  // namespace crun
