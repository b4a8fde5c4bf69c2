// Fuzzes the store's request handling as the server drives it: up to four StoreSessions on one
// KeySpace, fed by a script of commands, closed the way the server closes them.
//
// Input: records of [command u8][length u8][payload]. command % 4 picks the session, command / 4 % 6
// the action: 0 feed the payload as received bytes (in chunks of input_space()), 1 take its output
// (a flush), 2 advance the clock by payload[0] ms and expire parked requests, 3 close it (detach and
// open a fresh session), 4 report payload[0] KiB still in flight, 5 feed the payload repeated to
// payload[0] KiB (size paths). A session that ends itself is closed before the next command, as the
// server posts the close; one that ended inside a KeySpace callback too (the output_ready hook),
// or that the sessions' shared reply bound evicted. Limits are small so that overflow, eviction,
// pending and deadline paths are reached.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "store/store_keyspace.h"
#include "store/store_session.h"

namespace {

using crun::KeySpace;
using crun::SessionLimits;
using crun::StoreSession;

struct Harness {
  KeySpace keys;
  SessionLimits limits;
  crun::ReplyBudget replies{96 * 1024};
  std::unique_ptr<StoreSession> sessions[4];
  bool close_posted[4] = {};
  std::uint64_t serial = 0;
  StoreSession::Clock::time_point now{};

  Harness() {
    limits.max_outbound_bytes = 64 * 1024;
    limits.max_pending = 8;
    for (int i = 0; i < 4; ++i) open(i);
  }
  void open(int i) {
    sessions[i] = std::make_unique<StoreSession>(
        keys, limits, ++serial,
        [this, i] {
          if (sessions[i]->ended()) close_posted[i] = true;  // the server posts the close
        },
        &replies);
    close_posted[i] = false;
  }
  void close(int i) {
    sessions[i]->detach();
    open(i);
  }
  void settle() {
    for (int i = 0; i < 4; ++i) {
      if (close_posted[i] || sessions[i]->ended()) close(i);
    }
  }
  void feed(int i, const std::uint8_t* p, std::size_t n) {
    while (n > 0 && !sessions[i]->ended()) {
      auto space = sessions[i]->input_space();
      if (space.empty()) std::abort();  // the session must always offer room or end
      const std::size_t k = std::min(space.size(), n);
      std::memcpy(space.data(), p, k);
      sessions[i]->received(k, now);
      if (sessions[i]->buffer_capacity() > 4 * (sessions[i]->buffered() + StoreSession::kReadChunk)) std::abort();
      p += k;
      n -= k;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Harness h;
  crun::ReplyQueue out(&h.replies);
  std::size_t pos = 0;
  while (pos + 2 <= size) {
    const std::uint8_t command = data[pos];
    const std::size_t len = std::min<std::size_t>(data[pos + 1], size - pos - 2);
    const std::uint8_t* payload = data + pos + 2;
    pos += 2 + len;
    const int i = command % 4;
    const std::uint8_t arg = len > 0 ? payload[0] : 0;
    switch (command / 4 % 6) {
      case 0: h.feed(i, payload, len); break;
      case 1: h.sessions[i]->take_output(out); break;
      case 2:
        h.now += std::chrono::milliseconds(arg);
        for (auto& s : h.sessions) s->expire(h.now);
        break;
      case 3: h.close(i); break;
      case 4: h.sessions[i]->set_in_flight(std::size_t{arg} * 1024, std::size_t{arg} * 512); break;
      case 5: {
        std::string big;
        const std::size_t want = std::size_t{arg} * 1024;
        while (len > 0 && big.size() < want) big.append(reinterpret_cast<const char*>(payload), len);
        h.feed(i, reinterpret_cast<const std::uint8_t*>(big.data()), big.size());
        break;
      }
    }
    h.settle();
  }
  for (int i = 0; i < 4; ++i) h.close(i);
  if (h.keys.parked_keys() != 0) std::abort();  // every closed session took its parked requests
  return 0;
}
