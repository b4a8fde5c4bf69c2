#include "launcher/setting_sources.h"

#include <cstdint>
#include <cstdlib>
#include <optional>

#include "launcher/option_values.h"

namespace crun {

namespace {

// A PET_* variable of an on/off flag; set but empty means off.
std::string flag_text(const std::string& name, const std::string& text) {
  if (trim(text).empty()) return "0";
  if (auto b = parse_bool(text)) return *b ? "1" : "0";
  throw LaunchUsageError(name + ": expected true or false, got '" + text + "'");
}

// The first of spec.more_vars that `env` sets: its text and its name.
std::optional<Sourced<std::string>> more_var(const SettingSpec& spec, const EnvSnapshot& env) {
  for (const auto& name : split(spec.more_vars, ',')) {
    if (name.empty()) continue;
    if (auto text = env.get(name)) return Sourced<std::string>{spec.is_flag ? flag_text(name, *text) : *text, name};
  }
  return std::nullopt;
}

}  // namespace

SettingTexts apply_precedence(const CommandLine& cl, const EnvSnapshot& env, JobEnvironment& job) {
  SettingTexts out;
  auto resolve = [&](const SettingSpec& spec, bool use_job) {
    const std::string key = spec.key;
    const std::string pet = pet_name(key);
    Sourced<std::string> v{spec.fallback, "default"};
    if (auto it = cl.given.find(key); it != cl.given.end()) {
      v = it->second;
    } else if (auto text = spec.reads_pet ? env.get(pet) : std::nullopt) {
      v = {spec.is_flag ? flag_text(pet, *text) : *text, pet};
    } else if (auto var = more_var(spec, env)) {
      v = *var;
    } else if (auto it = job.defaults.find(key); use_job && it != job.defaults.end()) {
      v = it->second;
      out.from_job.insert(key);
    }
    out.by_key[key] = v;
  };
  for (const auto& spec : launch_settings()) {
    if (std::string(spec.key) == "standalone") resolve(spec, true);
  }
  const bool standalone = out.at("standalone").value == "1";
  if (standalone) job.note.clear();
  static const std::set<std::string> shape = {"nnodes", "rdzv_backend", "rdzv_endpoint", "node_rank", "master_addr", "master_port"};
  for (const auto& spec : launch_settings()) {
    if (std::string(spec.key) != "standalone") resolve(spec, !(standalone && shape.count(spec.key)));
  }
  return out;
}

int int_setting(const SettingTexts& s, const std::string& key, const std::string& flag) {
  const auto& v = s.at(key);
  const auto n = parse_long(v.value);
  if (!n || *n < INT32_MIN || *n > INT32_MAX) {
    throw LaunchUsageError(flag + ": expected an integer, got '" + v.value + "' (from " + v.source + ")");
  }
  return static_cast<int>(*n);
}

double number_setting(const SettingTexts& s, const std::string& key, const std::string& flag) {
  const auto& v = s.at(key);
  const std::string t = trim(v.value);
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) {
    throw LaunchUsageError(flag + ": expected a number, got '" + v.value + "' (from " + v.source + ")");
  }
  return d;
}

}  // namespace crun
