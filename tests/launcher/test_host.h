// test_host: the host the launcher's unit tests resolve a launch plan on. node-a at 10.0.0.5
// (and loopback), 8 CPUs, no GPU; node-a, node-b and localhost resolve; the Slurm nodes n1 and
// n2 do not, and scontrol knows them at 10.0.0.5 and 10.0.0.6. Threading: a pure function; the
// value's functions keep no state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_inputs.h"

namespace crun::test {

inline HostFacts test_host() {
  HostFacts h;
  h.hostname = "node-a";
  h.addresses = {"127.0.0.1", "10.0.0.5"};
  h.cpus = 8;
  h.gpus = 0;
  h.resolve = [](const std::string& name) -> std::vector<std::string> {
    if (name == "localhost") return {"127.0.0.1"};
    if (name == "node-a") return {"10.0.0.5"};
    if (name == "node-b") return {"10.0.0.6"};
    return {};
  };
  h.slurm_node_addr = [](const std::string& name) -> std::optional<std::string> {
    if (name == "n1") return "10.0.0.5";
    if (name == "n2") return "10.0.0.6";
    return std::nullopt;
  };
  return h;
}

}  // namespace crun::test
