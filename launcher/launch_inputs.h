// EnvSnapshot and HostFacts: what a launch reads of the world, as plain values. The one seam.
//
// Contract
//   - EnvSnapshot: environment variables by name. get(name) is the value, or nullopt when the
//     variable is unset or empty (crun reads an empty variable as unset); entries() lists every
//     variable as NAME=VALUE (a worker's base environment under --slurm-tasks).
//   - HostFacts: this host's name, the numeric addresses of its interfaces that are up (loopback
//     included), its CPUs and NVIDIA GPUs, and two lookups: resolve(name), the numeric addresses a
//     host name stands for (DNS, /etc/hosts; empty when it does not resolve), and
//     slurm_node_addr(name), the NodeAddr `scontrol show node` reports (nullopt when none). An
//     unset lookup answers "nothing".
//   - EnvSnapshot::from_process() and HostFacts::of_this_host() are the only places in launcher/
//     that read the process environment, gethostname, getifaddrs, DNS, /dev or scontrol; the rest
//     of the launcher takes these values, so tests and the fuzz target inject them.
//
// Threading
//   from_process() and of_this_host(): call from main before other threads exist. The lookups
//   of_this_host() installs block (DNS; scontrol up to 15 s) and are safe from any thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crun {

struct EnvSnapshot {
  std::map<std::string, std::string> vars;

  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> entries() const;

  static EnvSnapshot from_process();
};

struct HostFacts {
  std::string hostname = "localhost";
  std::vector<std::string> addresses;
  int cpus = 1;
  int gpus = 0;
  std::function<std::vector<std::string>(const std::string& name)> resolve;
  std::function<std::optional<std::string>(const std::string& node)> slurm_node_addr;

  static HostFacts of_this_host();
};

}  // namespace crun
