// CpuTopology: what NUMA binding needs to know of this host's CPUs and NVIDIA GPUs, as a plain
// value, and read_cpu_topology, which reads it from sysfs.
//
// Contract
//   - cpus: every logical CPU listed by a NUMA node (<root>/devices/system/node/node*/cpulist;
//     without node directories, every CPU of <root>/devices/system/cpu/online is on node 0), with
//     its socket (topology/physical_package_id; 0 when absent), its physical core (the smallest
//     CPU of topology/thread_siblings_list; itself when absent) and its core complex (the smallest
//     CPU of the shared_cpu_list of its highest-level Unified or Data cache under cache/index*, as
//     torch reads it; itself when absent). Sorted by id.
//   - allowed: the CPUs the launching process may run on (sched_getaffinity). read_cpu_topology
//     leaves it empty; HostFacts::of_this_host fills it.
//   - gpu_nodes: for each NVIDIA GPU, the NUMA node of its PCI device (numa_node; -1, a host
//     with one node, reads as node 0, as torch does). GPUs are the PCI devices under
//     <root>/bus/pci/devices with vendor 0x10de and a display class (0x03xxxx), in PCI address
//     order. Assumption: that is CUDA's device order (CUDA_DEVICE_ORDER=PCI_BUS_ID; CUDA's
//     default, FASTEST_FIRST, gives the same order when the GPUs are alike).
//   - read_cpu_topology never throws: what it cannot read is left out (no GPU, no CPU).
//
// Threading
//   Plain value; read_cpu_topology reads files only and may run on any thread.
#pragma once

#include <string>
#include <vector>

namespace crun {

struct CpuTopology {
  struct Cpu {
    int id = 0;
    int node = 0;
    int package = 0;
    int core = 0;          // the smallest logical CPU on the same physical core
    int core_complex = 0;  // the smallest logical CPU sharing the same last-level cache
  };
  std::vector<Cpu> cpus;
  std::vector<int> allowed;
  std::vector<int> gpu_nodes;  // by physical GPU index
};

CpuTopology read_cpu_topology(const std::string& sysfs_root = "/sys");

// "0-2,4,7-8" -> {0, 1, 2, 4, 7, 8} (sysfs's list format; blanks and empty items skipped).
std::vector<int> parse_cpu_list(const std::string& text);
// The reverse, sorted and compact: {0, 1, 2, 4} -> "0-2,4".
std::string format_cpu_list(std::vector<int> cpus);

}  // namespace crun
