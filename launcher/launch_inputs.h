// EnvSnapshot and HostFacts: what a launch reads of the world, as plain values. The one seam.
//
// Contract
//   - EnvSnapshot: environment variables by name. get(name) is the value, or nullopt when the
//     variable is unset or empty (crun reads an empty variable as unset); entries() lists every
//     variable as NAME=VALUE (a worker's base environment under --slurm-tasks).
//   - HostFacts: this host's name, the numeric addresses of its interfaces that are up (loopback
//     included), its CPUs and NVIDIA GPUs, and two lookups: resolve(name), the numeric addresses a
//     host name stands for (DNS, /etc/hosts; empty when it does not resolve), and
//     slurm_node_addr(name), the NodeAddr `scontrol show node` reports (nullopt when none), and
//     writable_dir(dir), whether this user may make files there (access(2)). An unset lookup
//     answers "nothing" (false). cpu_topology: the CPUs' NUMA nodes, sockets, cores and
//     caches, the CPUs this process may run on and the GPUs' NUMA nodes (launcher/cpu_topology.h),
//     for --numa-binding only.
//   - EnvSnapshot::from_process() and HostFacts::of_this_host() are the only places in launcher/
//     that read the process environment, gethostname, getifaddrs, DNS, /dev, /sys, the process's
//     CPU affinity, a directory's permissions or scontrol; the rest of the launcher takes these values, so tests and the fuzz
//     target inject them.
//   - The addresses, the GPU count and the CPU topology are Lazy: of_this_host() reads them the
//     first time they are asked for (most launches need none, and getifaddrs plus a /dev scan cost
//     0.15 ms); a test assigns plain values.
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

#include "launcher/cpu_topology.h"

namespace crun {

struct EnvSnapshot {
  std::map<std::string, std::string> vars;

  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> entries() const;

  static EnvSnapshot from_process();
};

// A value given at once, or read by a function the first time it is asked for.
template <typename T>
class Lazy {
 public:
  Lazy() : value_(T{}) {}
  Lazy(T value) : value_(std::move(value)) {}  // NOLINT: plain values assign as they are
  static Lazy read_by(std::function<T()> read) {
    Lazy l;
    l.value_.reset();
    l.read_ = std::move(read);
    return l;
  }
  Lazy& operator=(T value) {
    value_ = std::move(value);
    read_ = nullptr;
    return *this;
  }
  const T& get() const {
    if (!value_) value_ = read_();
    return *value_;
  }

 private:
  mutable std::optional<T> value_;
  std::function<T()> read_;
};

struct HostFacts {
  std::string hostname = "localhost";
  Lazy<std::vector<std::string>> addresses;
  Lazy<int> cpus = 1;  // online CPUs: read from /sys only when asked (--nproc-per-node cpu, auto)
  Lazy<int> gpus;
  Lazy<CpuTopology> cpu_topology;
  std::function<std::vector<std::string>(const std::string& name)> resolve;
  std::function<std::optional<std::string>(const std::string& node)> slurm_node_addr;
  std::function<bool(const std::string& dir)> writable_dir;  // this user may make files there

  static HostFacts of_this_host();
};

}  // namespace crun
