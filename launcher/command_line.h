// The launch command line: torchrun's settings table and the parse of argv (CLI11), nothing else.
//
// Contract
//   - launch_settings() is the table of every launch setting: its key (torchrun's name with '_',
//     also JobEnvironment's key), its flags in both spellings, its help line, its built-in default
//     text and whether it is an on/off flag. pet_name(key) is its variable: PET_<KEY>, read unless
//     torch reads none for it (--numa-binding, --logs-specs: no action=env in torch's run.py).
//   - parse_command_line(argv) (argv[0] is the program's own name) returns what the user typed:
//     each setting given as a flag (text, "1" for an on/off flag, and the flag's name as its
//     source), the launcher's own flags and the program with its arguments (everything after the
//     program is the program's). --help / --version set `exit_now` with the text to print. An
//     unknown flag, a bad flag syntax, a missing program throw LaunchUsageError (one line).
//     Values are not checked here.
//   - argparse's habits: a repeated option takes its last value (a repeatable one, SettingSpec::
//     repeatable, keeps every value, one a line); `--opt=` is an empty value and
//     never takes the next word. A setting's source is the spelling written (last), '_' as '-'.
//
// Threading
//   Pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_setting.h"

namespace crun {

struct SettingSpec {
  const char* key;
  const char* flags;  // CLI11 names, e.g. "--nproc-per-node,--nproc_per_node"
  const char* help;
  const char* fallback;
  bool is_flag = false;
  const char* more_vars = "";  // variables read after PET_<KEY>, in order ("A,B")
  bool reads_pet = true;       // false where torch reads no PET_<KEY> (its flag has no action=env)
  bool repeatable = false;     // each value given is kept: the text holds them one a line
};

const std::vector<SettingSpec>& launch_settings();
std::string pet_name(const std::string& key);

struct CommandLine {
  std::optional<std::string> exit_now;           // --help / --version
  std::map<std::string, Sourced<std::string>> given;  // by key: the settings given as flags
  bool print_config = false;
  bool slurm_tasks = false;
  std::vector<std::string> program;  // as the user wrote it, never empty unless exit_now
};

CommandLine parse_command_line(const std::vector<std::string>& argv);

}  // namespace crun
