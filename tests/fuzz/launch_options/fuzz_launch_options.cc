// Fuzzes crun's launch plan from the command line and the environment together
// (launcher/launch_plan.h: flags > PET_* > Slurm/platform variables > defaults).
//
// Input: ARGV '\x01' ENV, each a list of '\0'-separated strings: the command line after "crun",
// and the environment entries (NAME=VALUE) the resolver sees. Bad settings may only end in
// LaunchUsageError (what crun prints as its one-line usage error, exit 2); any other exception,
// an exit() or a sanitizer report is a crash.
//
// The environment is an injected EnvSnapshot and the host a fixed HostFacts (loopback only; a
// host name resolves to a TEST-NET address, scontrol knows no node): no DNS query, no scontrol
// and no change to the fuzzer's own environment per input.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_options.h"
#include "launcher/launch_plan.h"

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
  static const crun::HostFacts host = [] {
    crun::HostFacts h;
    h.hostname = "fuzz-node";
    h.addresses = {"127.0.0.1"};
    h.cpus = 4;
    h.gpus = 1;
    h.resolve = [](const std::string& name) {
      return name.empty() ? std::vector<std::string>{} : std::vector<std::string>{"192.0.2.1"};
    };
    h.slurm_node_addr = [](const std::string&) { return std::optional<std::string>(); };
    return h;
  }();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto marker = input.find('\x01');
  std::vector<std::string> args = split(input.substr(0, marker));
  args.insert(args.begin(), "crun");
  crun::EnvSnapshot env;
  if (marker != std::string::npos) {
    for (const auto& entry : split(input.substr(marker + 1))) {
      const auto eq = entry.find('=');
      if (eq != std::string::npos && eq > 0) env.vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  try {
    (void)crun::to_launch_options(crun::resolve_launch_plan(args, env, host));
  } catch (const crun::LaunchUsageError&) {
  }
  return 0;
}
