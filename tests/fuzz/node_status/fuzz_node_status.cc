// Fuzzes what an operator's tools read from the network: a node's published status (another
// agent's record, agent/node_status.h) and the /status document `crun status` prints
// (launcher/status_command.h). The first byte picks which. A record that parses survives
// to_json -> from_json -> to_json unchanged and merges into job_json (its grouped stacks, merged as
// node rank 0 merges them, stay within their bound); a document that is not
// /status's may only throw std::runtime_error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "agent/node_status.h"
#include "launcher/status_command.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    const auto s = crun::NodeStatus::from_json(text);
    if (!s) return 0;
    const std::string once = s->to_json();
    const auto back = crun::NodeStatus::from_json(once);
    if (!back || back->to_json() != once) std::abort();
    crun::NodeStatus self;
    self.run_id = s->run_id;
    self.node_id = "self";
    (void)crun::job_json(self, {text, once});
    const auto merged = crun::merged_stack_groups({text, once}, s->run_id, s->stack_groups.attempt, {s->stack_groups});
    if (merged.to_json().size() > crun::kMaxJsonBytes) std::abort();
  } else {
    try {
      (void)crun::format_job_status(text);
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
