// apply_precedence: each launch setting's text and source, flag > PET_* > job environment >
// default. The one place that order is applied.
//
// Contract
//   - For every setting of launch_settings(): the flag when given, else PET_<KEY> from `env` (not
//     for the settings whose reads_pet is false: torch reads no variable for them), else
//     the first of its more_vars that `env` sets (stop_timeout: PET_SHUTDOWN_TIMEOUT, then
//     TORCH_ELASTIC_SHUTDOWN_TIMEOUT), else the value the Slurm or platform environment (`job`)
//     gives, else the setting's default text.
//     An on/off flag's PET_* variable is read by parse_bool ("" = off; anything else unreadable
//     throws LaunchUsageError naming the variable) and becomes "1" or "0".
//   - --standalone (from any source) describes the job's shape itself: the job environment's
//     nnodes, rdzv_backend, rdzv_endpoint, node_rank, master_addr and master_port are not used, and
//     its launch note is dropped.
//   - `from_job` lists the settings whose value came from the job environment.
//   - int_setting / number_setting read a setting's text as an int / a number, else throw
//     LaunchUsageError naming `flag`, the text and its source. parse_setting(v, parse) runs
//     parse(v.value) and adds " (from SOURCE)" to its LaunchUsageError when v came from a
//     variable, not a flag.
//
// Threading
//   Pure function.
#pragma once

#include <map>
#include <set>
#include <string>

#include "launcher/command_line.h"
#include "launcher/job_environment.h"
#include "launcher/launch_inputs.h"

namespace crun {

struct SettingTexts {
  std::map<std::string, Sourced<std::string>> by_key;
  std::set<std::string> from_job;

  const Sourced<std::string>& at(const std::string& key) const { return by_key.at(key); }
  bool given(const std::string& key) const { return at(key).source != "default"; }
};

SettingTexts apply_precedence(const CommandLine& cl, const EnvSnapshot& env, JobEnvironment& job);

template <typename Parse>
auto parse_setting(const Sourced<std::string>& v, Parse&& parse) -> decltype(parse(v.value)) {
  try {
    return parse(v.value);
  } catch (const LaunchUsageError& e) {
    if (v.source.rfind("-", 0) == 0) throw;
    throw LaunchUsageError(std::string(e.what()) + " (from " + v.source + ")");
  }
}

int int_setting(const SettingTexts& s, const std::string& key, const std::string& flag);
double number_setting(const SettingTexts& s, const std::string& key, const std::string& flag);

}  // namespace crun
