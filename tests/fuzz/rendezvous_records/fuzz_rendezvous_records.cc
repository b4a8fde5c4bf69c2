// Fuzzes the rendezvous records a peer writes to the store or to etcd (rendezvous/rendezvous_records.h).
// The first byte picks the record, the rest is its JSON text. A malformed record may only throw
// std::invalid_argument; a record that parses survives to_json -> from_json unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "rendezvous/rendezvous_records.h"

namespace {

template <typename Record>
void check(const std::string& text) {
  Record r;
  try {
    r = Record::from_json(text);
  } catch (const std::invalid_argument&) {
    return;
  }
  const std::string once = r.to_json();
  if (Record::from_json(once).to_json() != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0: {
      check<crun::NodeRecord>(text);
      try {  // mismatch() against a default record names fields from the peer's record
        (void)crun::NodeRecord{}.mismatch(crun::NodeRecord::from_json(text));
      } catch (const std::invalid_argument&) {
      }
      break;
    }
    case 1: check<crun::RoundAnswer>(text); break;
    case 2: check<crun::RoundOutcome>(text); break;
    case 3: check<crun::ControlEvent>(text); break;
    case 4: check<crun::EtcdRoundRecord>(text); break;
    case 5: check<crun::EtcdJoinRecord>(text); break;
    case 6: check<crun::EtcdReportRecord>(text); break;
    default: check<crun::ControlEvent>(text); break;
  }
  return 0;
}
