#include "launcher/torch2_settings.h"

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

std::string check_event_log_handler(const std::string& text) {
  if (text != "null" && text != "console" && text != "dynamic_rendezvous") {
    usage("--event-log-handler: expected null, console or dynamic_rendezvous, got '" + text + "'");
  }
  return text;
}

std::string check_filters(const std::string& flag, const std::string& text) {
  if (!text.empty()) usage(flag + ": crun does not implement duplicating filtered lines yet");
  return text;
}

std::string check_numa_binding(const std::string& text) {
  if (text.empty()) return text;
  if (text != "node" && text != "socket" && text != "exclusive" && text != "core-complex") {
    usage("--numa-binding: expected node, socket, exclusive or core-complex, got '" + text + "'");
  }
  usage("--numa-binding: crun does not implement NUMA binding yet");
}

}  // namespace

void plan_torch2_settings(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan) {
  const auto& virt = s.at("virtual_local_rank");
  if (virt.value == "1") {
    plan.visible_devices = {parse_setting(virt, [&](const std::string&) { return visible_devices(env, plan.nproc_per_node.value); }),
                            virt.source};
  } else {
    plan.visible_devices = {{}, virt.source};
  }
  plan.log_line_prefix_template = env.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE").value_or("");
  parse_setting(s.at("event_log_handler"), check_event_log_handler);
  parse_setting(s.at("duplicate_stdout_filters"), [](const std::string& t) { return check_filters("--duplicate-stdout-filters", t); });
  parse_setting(s.at("duplicate_stderr_filters"), [](const std::string& t) { return check_filters("--duplicate-stderr-filters", t); });
  parse_setting(s.at("numa_binding"), check_numa_binding);
}

}  // namespace crun
