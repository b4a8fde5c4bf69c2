// Fuzzes crun's launch settings from the command line and the environment together
// (launcher/launch_options.h: flags > PET_* > Slurm/platform variables > defaults).
//
// Input: ARGV '\x01' ENV, each a list of '\0'-separated strings: the command line after "crun",
// and the environment entries (NAME=VALUE) the parse sees. Bad settings may only end in
// LaunchUsageError (what crun prints as its one-line usage error, exit 2); any other exception,
// an exit() or a sanitizer report is a crash.
//
// The environment is injected by pointing `environ` at the input's entries for the one call (the
// code reads it through getenv) and restoring it afterwards: the fuzzer's own environment is never
// changed. This target compiles job_environment.cc in fuzzing mode, where resolve_slurm_node
// answers from the name alone instead of asking DNS or running scontrol. (When the launch plan gets
// an injected environment, this harness passes the entries to it instead.)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/launch_options.h"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = text.find('\0', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto marker = input.find('\x01');
  std::vector<std::string> args = split(input.substr(0, marker));
  std::vector<std::string> env = marker == std::string::npos ? std::vector<std::string>{} : split(input.substr(marker + 1));
  args.insert(args.begin(), "crun");

  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) {
    if (!e.empty()) envp.push_back(e.data());
  }
  envp.push_back(nullptr);

  char** const saved = environ;
  environ = envp.data();
  try {
    (void)crun::parse_launch_options(static_cast<int>(args.size()), argv.data());
  } catch (const crun::LaunchUsageError&) {
  } catch (...) {
    environ = saved;
    throw;  // not a usage error: crun would die of it
  }
  environ = saved;
  return 0;
}
