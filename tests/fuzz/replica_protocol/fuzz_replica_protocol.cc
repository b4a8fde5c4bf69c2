// Fuzzes the state replicas' decoder (agent/replica_protocol.h) with what a peer may send. The
// first byte picks the side (server: a client's messages; client: a server's) and how the input
// is cut into pieces; the rest is the byte stream. Checked: the decoder never holds more than one
// header, hands on no more file bytes than the set declared, stops at its first error and keeps
// refusing after it; the same stream fed whole and in pieces gives the same events.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/replica_protocol.h"

namespace {

using crun::replica::ReplicaDecoder;

std::string run(ReplicaDecoder::Side side, const char* data, std::size_t size, std::size_t piece, bool* ok) {
  std::string log;
  std::uint64_t declared = 0, file_bytes = 0;
  crun::replica::ReplicaEvents ev;
  ev.hello = [&](std::string_view t) { log += "H" + std::to_string(t.size()); };
  ev.set_begin = [&](int r, std::uint64_t q, std::uint32_t f, std::uint64_t b) {
    declared = b;
    file_bytes = 0;
    log += "S" + std::to_string(r) + "," + std::to_string(q) + "," + std::to_string(f);
  };
  ev.file_begin = [&](std::string_view n, std::uint64_t z) {
    if (!crun::replica::valid_name(n)) std::abort();
    log += "F" + std::string(n) + std::to_string(z);
  };
  ev.file_data = [&](const char*, std::size_t n) {
    file_bytes += n;
    if (file_bytes > declared) std::abort();
  };
  ev.file_end = [&] { log += "e"; };
  ev.set_end = [&] {
    if (file_bytes != declared) std::abort();
    log += "E";
  };
  ev.query = [&](int r) { log += "Q" + std::to_string(r); };
  ev.get = [&](int r) { log += "G" + std::to_string(r); };
  ev.have = [&](int r, std::uint64_t s) { log += "V" + std::to_string(r) + "," + std::to_string(s); };
  ev.ack = [&](int r, std::uint64_t s) { log += "A" + std::to_string(r) + "," + std::to_string(s); };
  ReplicaDecoder d(side, ev, 1 << 16);
  *ok = true;
  for (std::size_t at = 0; at < size; at += piece) {
    const std::size_t n = std::min(piece, size - at);
    if (!d.feed(data + at, n)) {
      *ok = false;
      if (d.error().empty() || d.error().find('\n') != std::string::npos) std::abort();
      if (d.feed("Q\0\0\0\0", 5)) std::abort();  // refused for good
      break;
    }
  }
  return log + (*ok ? "" : "!" + d.error());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto side = data[0] & 1 ? ReplicaDecoder::Side::kClient : ReplicaDecoder::Side::kServer;
  const std::size_t piece = 1 + (data[0] >> 1);
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  bool ok_whole = false, ok_pieces = false;
  const std::string whole = run(side, bytes, size - 1, size, &ok_whole);
  const std::string pieces = run(side, bytes, size - 1, piece, &ok_pieces);
  if (whole != pieces || ok_whole != ok_pieces) std::abort();
  return 0;
}
