#include "launcher/node_check_options.h"

#include <algorithm>

#include "agent/node_check.h"
#include "launcher/option_values.h"
#include "launcher/worker_settings.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

// A repeatable setting's values: one a line, blank lines dropped.
std::vector<std::string> values(const std::string& text) {
  std::vector<std::string> out;
  for (auto& v : split(text, '\n')) {
    if (!trim(v).empty()) out.push_back(trim(v));
  }
  return out;
}

std::chrono::milliseconds seconds(const SettingTexts& s, const char* key) {
  const auto& v = s.at(key);
  const double t = number_setting(s, key, v.source);
  if (!(t > 0) || t > 1e6) usage(v.source + ": expected seconds > 0, got '" + v.value + "'");
  return std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(t * 1000.0)));
}

}  // namespace

void plan_node_checks(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan) {
  NodeCheckSettings c;
  c.search_path = env.get("PATH").value_or(kDefaultSearchPath);
  const auto& commands = s.at("node_check");
  for (const auto& command : values(commands.value)) {
    std::string error;
    if (!split_command(command, error)) usage(commands.source + ": " + error);
    c.commands.push_back(command);
  }
  const auto& names = s.at("no_node_check");
  for (const auto& name : values(names.value)) {
    const auto& known = builtin_node_checks();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      usage(names.source + ": unknown check '" + name + "' (built-in checks: disk, net, gpu)");
    }
    c.disabled.insert(name);
  }
  c.timeout = seconds(s, "node_check_timeout");
  c.interval = seconds(s, "node_check_interval");
  c.paths = values(s.at("node_check_path").value);
  const auto& min_free = s.at("node_check_min_free");
  const auto bytes = parse_byte_size(min_free.value);
  if (!bytes) usage(min_free.source + ": expected a size such as 100M or 1G, got '" + min_free.value + "'");
  c.min_free = *bytes;
  std::string source = commands.source;
  for (const char* key : {"no_node_check", "node_check_timeout", "node_check_interval", "node_check_path", "node_check_min_free"}) {
    if (source == "default") source = s.at(key).source;
  }
  plan.node_checks = {std::move(c), source};
}

}  // namespace crun
