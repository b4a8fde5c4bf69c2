// --numa-binding: torch's four modes over a fake topology, and the sysfs reader over a fake tree.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "launcher/cpu_topology.h"
#include "launcher/launch_setting.h"
#include "launcher/numa_binding.h"

using namespace crun;

namespace {

// 2 sockets x 2 NUMA nodes x 4 physical cores, SMT 2 (CPU c and c+16 share a core), 2 core
// complexes of 2 cores per node, 8 GPUs: GPU g on node g/2.
CpuTopology two_sockets() {
  CpuTopology t;
  for (int id = 0; id < 32; ++id) {
    CpuTopology::Cpu c;
    c.id = id;
    c.core = id % 16;
    c.node = c.core / 4;
    c.package = c.node / 2;
    c.core_complex = c.core - c.core % 2;
    t.cpus.push_back(c);
    t.allowed.push_back(id);
  }
  t.gpu_nodes = {0, 0, 1, 1, 2, 2, 3, 3};
  return t;
}

using Lists = std::vector<std::vector<int>>;

std::string usage_error(const std::string& mode, int nproc, const CpuTopology& t) {
  try {
    numa_cpus(mode, nproc, t);
  } catch (const LaunchUsageError& e) {
    return e.what();
  }
  return "(no error)";
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

}  // namespace

TEST_CASE("node: the allowed CPUs of the GPU's NUMA node", "[numa]") {
  const auto cpus = numa_cpus("node", 8, two_sockets());
  REQUIRE(cpus.size() == 8);
  CHECK(cpus[0] == std::vector<int>{0, 1, 2, 3, 16, 17, 18, 19});
  CHECK(cpus[1] == cpus[0]);
  CHECK(cpus[5] == std::vector<int>{8, 9, 10, 11, 24, 25, 26, 27});
  auto t = two_sockets();
  t.allowed = {1, 2, 3, 17, 30};
  CHECK(numa_cpus("node", 2, t) == Lists{{1, 2, 3, 17}, {1, 2, 3, 17}});
}

TEST_CASE("socket: the allowed CPUs of every NUMA node of the GPU's socket", "[numa]") {
  const auto cpus = numa_cpus("socket", 8, two_sockets());
  const std::vector<int> socket0{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const std::vector<int> socket1{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  for (int lr = 0; lr < 8; ++lr) CHECK(cpus[static_cast<std::size_t>(lr)] == (lr < 4 ? socket0 : socket1));
}

TEST_CASE("exclusive: the node's physical cores split among its GPUs, lower GPUs first", "[numa]") {
  CHECK(numa_cpus("exclusive", 8, two_sockets()) == Lists{{0, 1, 16, 17},
                                                         {2, 3, 18, 19},
                                                         {4, 5, 20, 21},
                                                         {6, 7, 22, 23},
                                                         {8, 9, 24, 25},
                                                         {10, 11, 26, 27},
                                                         {12, 13, 28, 29},
                                                         {14, 15, 30, 31}});
  auto three = two_sockets();
  three.gpu_nodes = {0, 0, 0};  // 4 cores for 3 GPUs: the first gets the extra one
  CHECK(numa_cpus("exclusive", 3, three) == Lists{{0, 1, 16, 17}, {2, 18}, {3, 19}});
  auto partly = two_sockets();
  partly.allowed = {0, 16, 17, 2, 3, 18, 19};  // CPU 1 not allowed: core 1 keeps CPU 17 only
  CHECK(numa_cpus("exclusive", 2, partly) == Lists{{0, 16, 17}, {2, 3, 18, 19}});
  auto crowded = two_sockets();
  crowded.gpu_nodes = {0, 0, 0, 0, 0};
  CHECK(usage_error("exclusive", 1, crowded) == "--numa-binding: exclusive: NUMA node 0 has 4 physical cores for 5 GPUs");
}

TEST_CASE("core-complex: the largest core complexes first, one per GPU of the node", "[numa]") {
  CHECK(numa_cpus("core-complex", 4, two_sockets()) == Lists{{0, 1, 16, 17}, {2, 3, 18, 19}, {4, 5, 20, 21}, {6, 7, 22, 23}});
  auto partly = two_sockets();
  partly.allowed = {0, 16, 17, 2, 3, 18, 19};  // complex 0 has 3 allowed CPUs, complex 2 has 4
  CHECK(numa_cpus("core-complex", 2, partly) == Lists{{2, 3, 18, 19}, {0, 16, 17}});
  auto three = two_sockets();
  three.gpu_nodes = {0, 0, 0};  // more GPUs than complexes: round robin
  CHECK(numa_cpus("core-complex", 3, three) == Lists{{0, 1, 16, 17}, {2, 3, 18, 19}, {0, 1, 16, 17}});
}

TEST_CASE("numa binding errors are one line naming --numa-binding", "[numa]") {
  auto none = two_sockets();
  none.gpu_nodes.clear();
  CHECK(usage_error("node", 1, none) == "--numa-binding: no NVIDIA GPU found (each local rank is bound near the GPU of its index)");
  CHECK(usage_error("node", 9, two_sockets()) == "--numa-binding: local rank 8 has no GPU (8 visible)");
  auto elsewhere = two_sockets();
  elsewhere.allowed = {8, 9};
  CHECK(usage_error("socket", 1, elsewhere) ==
        "--numa-binding: local rank 0 would run on no CPU (NUMA node 0 has none this process may use)");
}

TEST_CASE("CUDA_VISIBLE_DEVICES maps local rank i to the GPU of its i-th index", "[numa]") {
  const std::vector<int> nodes{0, 0, 1, 1};
  CHECK(visible_gpu_nodes(nodes, std::nullopt) == nodes);
  CHECK(visible_gpu_nodes(nodes, std::string("3, 0")) == std::vector<int>{1, 0});
  CHECK(visible_gpu_nodes(nodes, std::string("")).empty());
  CHECK(visible_gpu_nodes(nodes, std::string("2,7,0")) == std::vector<int>{1});  // CUDA stops at 7
  CHECK_THROWS_WITH(visible_gpu_nodes(nodes, std::string("GPU-1234")),
                    "--numa-binding: CUDA_VISIBLE_DEVICES entry 'GPU-1234' is not a GPU index (crun maps local ranks to GPUs by index)");
}

TEST_CASE("read_cpu_topology reads nodes, sockets, cores, caches and NVIDIA GPUs from sysfs", "[numa]") {
  const auto root = std::filesystem::temp_directory_path() / ("crun_numa_sysfs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  write(root / "devices/system/node/node0/cpulist", "0-1");
  write(root / "devices/system/node/node1/cpulist", "2-3");
  write(root / "devices/system/node/possible", "0-1");
  for (int c = 0; c < 4; ++c) {
    const auto dir = root / "devices/system/cpu" / ("cpu" + std::to_string(c));
    write(dir / "topology/physical_package_id", c < 2 ? "0" : "1");
    write(dir / "topology/thread_siblings_list", c < 2 ? "0-1" : std::to_string(c));
    write(dir / "cache/index0/type", "Instruction");  // not a data cache: never the core complex
    write(dir / "cache/index0/level", "4");
    write(dir / "cache/index0/shared_cpu_list", "0-3");
    write(dir / "cache/index2/type", "Unified");
    write(dir / "cache/index2/level", "2");
    write(dir / "cache/index2/shared_cpu_list", std::to_string(c));
    write(dir / "cache/index3/type", "Unified");
    write(dir / "cache/index3/level", "3");
    write(dir / "cache/index3/shared_cpu_list", c < 3 ? "0-2" : "3");
  }
  auto pci = [&](const std::string& address, const std::string& vendor, const std::string& klass, const std::string& node) {
    write(root / "bus/pci/devices" / address / "vendor", vendor);
    write(root / "bus/pci/devices" / address / "class", klass);
    write(root / "bus/pci/devices" / address / "numa_node", node);
  };
  pci("0000:c1:00.0", "0x10de", "0x030200", "1");
  pci("0000:41:00.0", "0x10de", "0x030000", "-1");
  pci("0000:42:00.0", "0x10de", "0x068000", "0");  // an NVSwitch bridge: not a GPU
  pci("0000:43:00.0", "0x8086", "0x030000", "0");  // another vendor's display
  const auto t = read_cpu_topology(root.string());
  std::filesystem::remove_all(root);
  REQUIRE(t.cpus.size() == 4);
  CHECK(t.cpus[1].node == 0);
  CHECK(t.cpus[2].node == 1);
  CHECK(t.cpus[2].package == 1);
  CHECK(t.cpus[1].core == 0);
  CHECK(t.cpus[3].core == 3);
  CHECK(t.cpus[2].core_complex == 0);
  CHECK(t.cpus[3].core_complex == 3);
  CHECK(t.allowed.empty());
  CHECK(t.gpu_nodes == std::vector<int>{0, 1});  // PCI address order; -1 reads as node 0
}

TEST_CASE("cpu lists parse and print in sysfs's format", "[numa]") {
  CHECK(parse_cpu_list("0-2,4, 7-8\n") == std::vector<int>{0, 1, 2, 4, 7, 8});
  CHECK(format_cpu_list({8, 0, 1, 2, 4, 7}) == "0-2,4,7-8");
  CHECK(format_cpu_list({}).empty());
}
