#include "launcher/numa_binding.h"

#include <algorithm>
#include <map>
#include <set>

#include "launcher/launch_setting.h"
#include "launcher/option_values.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError("--numa-binding: " + message); }

std::vector<int> allowed_on_node(const CpuTopology& t, int node) {
  const std::set<int> allowed(t.allowed.begin(), t.allowed.end());
  std::vector<int> out;
  for (const auto& c : t.cpus) {
    if (c.node == node && allowed.count(c.id) != 0) out.push_back(c.id);
  }
  return out;
}

const CpuTopology::Cpu& cpu(const CpuTopology& t, int id) {
  return *std::find_if(t.cpus.begin(), t.cpus.end(), [&](const CpuTopology::Cpu& c) { return c.id == id; });
}

std::vector<int> socket_cpus(const CpuTopology& t, int gpu_node) {
  const auto own = allowed_on_node(t, gpu_node);
  if (own.empty()) return {};
  const int socket = cpu(t, own.front()).package;
  std::set<int> nodes;
  for (const auto& c : t.cpus) nodes.insert(c.node);
  std::vector<int> out;
  for (int node : nodes) {
    const auto cpus = allowed_on_node(t, node);
    if (!cpus.empty() && cpu(t, cpus.front()).package == socket) out.insert(out.end(), cpus.begin(), cpus.end());
  }
  return out;
}

// The node's allowed CPUs grouped by `key` (a CPU's core or core complex), in key order.
std::vector<std::vector<int>> grouped(const CpuTopology& t, int node, int CpuTopology::Cpu::*key) {
  std::map<int, std::vector<int>> groups;
  for (int id : allowed_on_node(t, node)) groups[cpu(t, id).*key].push_back(id);
  std::vector<std::vector<int>> out;
  for (auto& entry : groups) out.push_back(std::move(entry.second));
  return out;
}

std::vector<int> cpus_for(const std::string& mode, int gpu, const CpuTopology& t, const std::vector<int>& gpu_nodes) {
  const int node = gpu_nodes[static_cast<std::size_t>(gpu)];
  if (mode == "node") return allowed_on_node(t, node);
  if (mode == "socket") return socket_cpus(t, node);
  int node_gpus = 0, relative = 0;
  for (int g = 0; g < static_cast<int>(gpu_nodes.size()); ++g) {
    if (gpu_nodes[static_cast<std::size_t>(g)] != node) continue;
    if (g < gpu) ++relative;
    ++node_gpus;
  }
  if (mode == "exclusive") {
    const auto cores = grouped(t, node, &CpuTopology::Cpu::core);
    const int per_gpu = static_cast<int>(cores.size()) / node_gpus;
    const int extra = static_cast<int>(cores.size()) % node_gpus;
    if (per_gpu < 1) {
      usage("exclusive: NUMA node " + std::to_string(node) + " has " + std::to_string(cores.size()) + " physical cores for " +
            std::to_string(node_gpus) + " GPUs");
    }
    const int start = relative * per_gpu + std::min(relative, extra);
    const int end = start + per_gpu + (relative < extra ? 1 : 0);
    std::vector<int> out;
    for (int i = start; i < end; ++i) out.insert(out.end(), cores[static_cast<std::size_t>(i)].begin(), cores[static_cast<std::size_t>(i)].end());
    return out;
  }
  auto complexes = grouped(t, node, &CpuTopology::Cpu::core_complex);
  if (complexes.empty()) return {};
  std::stable_sort(complexes.begin(), complexes.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return complexes[static_cast<std::size_t>(relative) % complexes.size()];
}

}  // namespace

std::vector<std::vector<int>> numa_cpus(const std::string& mode, int nproc, const CpuTopology& topology) {
  const auto& gpus = topology.gpu_nodes;
  if (gpus.empty()) usage("no NVIDIA GPU found (each local rank is bound near the GPU of its index)");
  std::vector<std::vector<int>> out;
  for (int lr = 0; lr < nproc; ++lr) {
    if (lr >= static_cast<int>(gpus.size())) {
      usage("local rank " + std::to_string(lr) + " has no GPU (" + std::to_string(gpus.size()) + " visible)");
    }
    auto cpus = cpus_for(mode, lr, topology, gpus);
    if (cpus.empty()) {
      usage("local rank " + std::to_string(lr) + " would run on no CPU (NUMA node " +
            std::to_string(gpus[static_cast<std::size_t>(lr)]) + " has none this process may use)");
    }
    std::sort(cpus.begin(), cpus.end());
    out.push_back(std::move(cpus));
  }
  return out;
}

std::vector<int> visible_gpu_nodes(const std::vector<int>& gpu_nodes, const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices) return gpu_nodes;
  std::vector<int> out;
  for (const auto& raw : split(*cuda_visible_devices, ',')) {
    const auto entry = trim(raw);
    if (entry.empty()) break;  // CUDA stops at the first entry it cannot read
    if (entry.find_first_not_of("0123456789") != std::string::npos || entry.size() > 6) {
      usage("CUDA_VISIBLE_DEVICES entry '" + entry + "' is not a GPU index (crun maps local ranks to GPUs by index)");
    }
    const auto index = static_cast<std::size_t>(std::stoi(entry));
    if (index >= gpu_nodes.size()) break;  // CUDA stops at the first index with no device
    out.push_back(gpu_nodes[index]);
  }
  return out;
}

}  // namespace crun
