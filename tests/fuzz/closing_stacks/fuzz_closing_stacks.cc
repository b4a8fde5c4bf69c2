// Fuzzes the closing job's stacks records (agent/closing_stacks.h) as node rank 0 reads them back
// from the store: the first byte picks the node rank they are taken for, the rest is the record.
// A record that parses survives to_json -> from_json unchanged; whatever the tally takes, it counts
// once and within its round's node ranks. Nothing may throw: from_json reports bad input by
// nullopt, with a reason.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/closing_stacks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int node_rank = data[0] % 4;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string why;
  const auto r = crun::StacksRecord::from_json(text, &why);
  if (!r) {
    if (why.empty()) std::abort();
  } else {
    const auto back = crun::StacksRecord::from_json(r->to_json());
    if (!back || back->round != r->round || back->node_rank != r->node_rank || back->node_id != r->node_id ||
        back->host != r->host || !(back->groups == r->groups)) {
      std::abort();
    }
  }
  crun::StacksGathering g(0, 0, 3, 0);
  const bool taken = g.arrived(node_rank, text);
  if (taken && (!r || r->round != 0 || r->node_rank != node_rank || node_rank >= 3)) std::abort();
  if (g.arrived(node_rank, text)) std::abort();  // once
  if (g.in().size() + g.missing().size() != 3) std::abort();
  return 0;
}
