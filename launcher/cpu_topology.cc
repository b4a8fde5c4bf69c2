#include "launcher/cpu_topology.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace crun {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

int read_int(const fs::path& path, int fallback) {
  try {
    const auto text = read_text(path);
    return text.empty() ? fallback : std::stoi(text, nullptr, 0);
  } catch (const std::exception&) {
    return fallback;
  }
}

int smallest(const std::vector<int>& cpus, int fallback) {
  return cpus.empty() ? fallback : *std::min_element(cpus.begin(), cpus.end());
}

// torch's _get_logical_cpus_sharing_same_max_level_cache_as: the highest-level Unified or Data cache.
int core_complex_of(const fs::path& cpu_dir, int cpu) {
  std::error_code ec;
  int best_level = -1;
  int group = cpu;
  for (const auto& entry : fs::directory_iterator(cpu_dir / "cache", ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("index", 0) != 0 || name.size() == 5 ||
        !std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const auto type = read_text(entry.path() / "type");
    if (type != "Unified" && type != "Data") continue;
    const int level = read_int(entry.path() / "level", -1);
    if (level <= best_level) continue;
    best_level = level;
    group = smallest(parse_cpu_list(read_text(entry.path() / "shared_cpu_list")), cpu);
  }
  return group;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t'; }), item.end());
    if (item.empty()) continue;
    try {
      const auto dash = item.find('-');
      const int first = std::stoi(item.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      for (int c = first; c <= last; ++c) out.push_back(c);
    } catch (const std::exception&) {
      continue;  // not a list item: skipped
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return out;
}

CpuTopology read_cpu_topology(const std::string& sysfs_root) {
  const fs::path root(sysfs_root);
  std::error_code ec;
  std::map<int, int> node_of;  // cpu -> NUMA node
  for (const auto& entry : fs::directory_iterator(root / "devices/system/node", ec)) {
    const auto name = entry.path().filename().string();
    if (!starts_with(name, "node") || name.size() == 4) continue;
    int node = 0;
    try {
      node = std::stoi(name.substr(4));
    } catch (const std::exception&) {
      continue;
    }
    for (int cpu : parse_cpu_list(read_text(entry.path() / "cpulist"))) node_of.emplace(cpu, node);
  }
  if (node_of.empty()) {
    for (int cpu : parse_cpu_list(read_text(root / "devices/system/cpu/online"))) node_of.emplace(cpu, 0);
  }
  CpuTopology t;
  for (const auto& [cpu, node] : node_of) {
    const fs::path dir = root / "devices/system/cpu" / ("cpu" + std::to_string(cpu));
    CpuTopology::Cpu c;
    c.id = cpu;
    c.node = node;
    c.package = read_int(dir / "topology/physical_package_id", 0);
    c.core = smallest(parse_cpu_list(read_text(dir / "topology/thread_siblings_list")), cpu);
    c.core_complex = core_complex_of(dir, cpu);
    t.cpus.push_back(c);
  }
  std::vector<std::string> gpus;  // PCI addresses: domain:bus:device.function, fixed-width hex
  for (const auto& entry : fs::directory_iterator(root / "bus/pci/devices", ec)) {
    if (read_text(entry.path() / "vendor") != "0x10de") continue;
    if (!starts_with(read_text(entry.path() / "class"), "0x03")) continue;
    gpus.push_back(entry.path().filename().string());
  }
  std::sort(gpus.begin(), gpus.end());
  for (const auto& address : gpus) {
    t.gpu_nodes.push_back(std::max(0, read_int(root / "bus/pci/devices" / address / "numa_node", -1)));
  }
  return t;
}

}  // namespace crun
