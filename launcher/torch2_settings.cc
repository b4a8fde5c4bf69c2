#include "launcher/torch2_settings.h"

#include "launcher/numa_binding.h"
#include "launcher/option_values.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

std::vector<std::string> visible_devices(const EnvSnapshot& env, int nproc) {
  const auto visible = env.vars.find("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> out;
  for (int lr = 0; lr < nproc; ++lr) {
    if (visible == env.vars.end()) {
      out.push_back(std::to_string(lr));
      continue;
    }
    const auto devices = split(visible->second, ',');
    if (static_cast<std::size_t>(lr) >= devices.size()) {
      usage("--virtual-local-rank: local rank " + std::to_string(lr) + " has no device in CUDA_VISIBLE_DEVICES=" +
            visible->second);
    }
    out.push_back(trim(devices[static_cast<std::size_t>(lr)]));
  }
  return out;
}

}  // namespace

// torch's comma-separated list: a comma separates, two commas are one literal comma; empty
// items are dropped (an empty list duplicates nothing).
std::vector<std::string> split_filters(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item.push_back(text[i]);
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item.push_back(',');
      ++i;
    } else {
      if (!item.empty()) out.push_back(item);
      item.clear();
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

namespace {

std::string check_numa_binding(const std::string& text) {
  if (text.empty()) return text;
  if (text != "node" && text != "socket" && text != "exclusive" && text != "core-complex") {
    usage("--numa-binding: expected node, socket, exclusive or core-complex, got '" + text + "'");
  }
  return text;
}

}  // namespace

void plan_torch2_settings(const SettingTexts& s, const EnvSnapshot& env, const HostFacts& host, LaunchPlan& plan) {
  const auto& virt = s.at("virtual_local_rank");
  if (virt.value == "1") {
    plan.visible_devices = {parse_setting(virt, [&](const std::string&) { return visible_devices(env, plan.nproc_per_node.value); }),
                            virt.source};
  } else {
    plan.visible_devices = {{}, virt.source};
  }
  if (auto tmpl = env.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) {
    plan.log_line_prefix_template = {*tmpl, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"};
  }
  const auto& out_filters = s.at("duplicate_stdout_filters");
  const auto& err_filters = s.at("duplicate_stderr_filters");
  plan.duplicate_stdout_filters = {split_filters(out_filters.value), out_filters.source};
  plan.duplicate_stderr_filters = {split_filters(err_filters.value), err_filters.source};
  const auto& numa = s.at("numa_binding");
  const auto mode = parse_setting(numa, check_numa_binding);
  plan.worker_cpus = {{}, numa.source};
  if (!mode.empty()) {
    CpuTopology topology = host.cpu_topology.get();
    const auto visible = env.vars.find("CUDA_VISIBLE_DEVICES");
    topology.gpu_nodes = visible_gpu_nodes(
        topology.gpu_nodes, visible == env.vars.end() ? std::nullopt : std::optional<std::string>(visible->second));
    plan.worker_cpus.value = numa_cpus(mode, plan.nproc_per_node.value, topology);
  }
}

}  // namespace crun
