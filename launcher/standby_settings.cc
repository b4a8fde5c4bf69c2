#include "launcher/standby_settings.h"

#include <cctype>

#include "launcher/option_values.h"

namespace crun {

namespace {

bool is_module_name(const std::string& name) {
  if (name.empty()) return false;
  for (const auto& part : split(name, '.')) {
    if (part.empty() || std::isdigit(static_cast<unsigned char>(part[0]))) return false;
    for (char c : part) {
      const auto u = static_cast<unsigned char>(c);
      if (!(std::isalnum(u) || c == '_' || u >= 0x80)) return false;
    }
  }
  return true;
}

std::vector<std::string> parse_preload(const std::string& text) {
  std::vector<std::string> modules;
  for (const auto& item : split(text, ',')) {
    const std::string name = trim(item);
    if (name.empty()) continue;
    if (!is_module_name(name)) throw LaunchUsageError("--standby-preload: '" + name + "' is not a Python module name");
    modules.push_back(name);
  }
  return modules;
}

}  // namespace

void plan_standby(const SettingTexts& s, LaunchPlan& plan) {
  const auto& on = s.at("standby_workers");
  const auto& preload = s.at("standby_preload");
  plan.standby_preload = {parse_setting(preload, parse_preload), preload.source};
  plan.standby_workers = {on.value == "1", on.source};
  if (plan.standby_workers.value && !plan.runs_python) {
    plan.standby_workers = {false, on.source + ", not a Python program"};
    const std::string line = "crun: " + on.source + ": standby workers are for Python programs; " +
                             plan.worker_argv.value.front() + " starts cold at every restart";
    plan.note += (plan.note.empty() ? "" : "\n") + line;
  }
}

}  // namespace crun
