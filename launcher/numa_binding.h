// numa_cpus: torchrun's --numa-binding (torch/numa/binding.py) as a pure function: the logical
// CPUs each local rank is bound to.
//
// Contract
//   - Local rank i uses GPU i (torch's gpu_index = local rank), counted over `gpu_nodes`: the NUMA
//     node of each GPU the workers can see, by CUDA index (visible_gpu_nodes).
//   - "node": the allowed CPUs of the GPU's NUMA node. "socket": the allowed CPUs of every NUMA
//     node whose smallest allowed CPU is on the socket of the GPU node's smallest allowed CPU.
//     "exclusive": the GPU node's allowed CPUs grouped by physical core (in core order), the cores
//     split evenly among that node's GPUs in GPU order, the lower GPUs one extra core each when
//     the split is uneven. "core-complex": the GPU node's allowed CPUs grouped by core complex
//     (last-level cache), the groups ordered by size (largest first) then smallest CPU; the n-th
//     GPU of the node gets group n modulo the group count.
//   - Throws LaunchUsageError, one line naming --numa-binding, when there is no NVIDIA GPU, a local
//     rank has no GPU, a node has fewer physical cores than GPUs (exclusive), or a rank's set is
//     empty. Each returned list is sorted.
//   - visible_gpu_nodes: CUDA_VISIBLE_DEVICES (nullopt: unset) as CUDA reads integer indices:
//     entry i is CUDA index i; the list ends at the first empty entry or index with no GPU (set but
//     empty: no GPU).
//     An entry that is not an index (a UUID, a MIG name) throws LaunchUsageError.
//
// Threading
//   Pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/cpu_topology.h"

namespace crun {

std::vector<std::vector<int>> numa_cpus(const std::string& mode, int nproc, const CpuTopology& topology);

std::vector<int> visible_gpu_nodes(const std::vector<int>& gpu_nodes, const std::optional<std::string>& cuda_visible_devices);

}  // namespace crun
