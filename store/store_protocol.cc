#include "store/store_protocol.h"

#include <string>

namespace crun::wire {

const char* op_name(Op op) {
  switch (op) {
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kCompareSet: return "compare_set";
    case Op::kCheck: return "check";
    case Op::kWait: return "wait";
    case Op::kDelete: return "delete";
    case Op::kNumKeys: return "num_keys";
    case Op::kMultiGet: return "multi_get";
    case Op::kMultiSet: return "multi_set";
    case Op::kAppend: return "append";
    case Op::kListKeys: return "list_keys";
    case Op::kTryGet: return "try_get";
    case Op::kWatch: return "watch";
    case Op::kUnwatch: return "unwatch";
    case Op::kPing: return "ping";
    case Op::kSetEphemeral: return "set_ephemeral";
  }
  return "unknown";
}

const char* status_name(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kTimeout: return "timeout";
    case Status::kBadRequest: return "bad request";
    case Status::kKeyTooLong: return "key too long";
    case Status::kValueTooLarge: return "value too large";
    case Status::kNotInteger: return "value is not an integer";
    case Status::kTooManyPending: return "too many pending requests";
    case Status::kUnknownOp: return "unknown operation";
    case Status::kTooManyKeys: return "too many keys";
    case Status::kNotify: return "notify";
  }
  return "unknown status";
}

const char* hello_status_name(HelloStatus status) {
  switch (status) {
    case HelloStatus::kOk: return "ok";
    case HelloStatus::kBadVersion: return "unsupported protocol version";
    case HelloStatus::kBadToken: return "wrong or missing token";
    case HelloStatus::kServerFull: return "server at its connection limit";
  }
  return "unknown handshake status";
}

std::string encode_hello(std::string_view token) {
  if (token.size() > kMaxTokenLength) throw ProtocolError("token longer than " + std::to_string(kMaxTokenLength));
  std::string out;
  Writer w(out);
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(static_cast<std::uint16_t>(token.size()));
  out.append(token);
  return out;
}

std::uint32_t decode_frame_length(const char* header, std::size_t max_body) {
  std::uint32_t len;
  std::memcpy(&len, header, 4);
  if (len < kBodyHeaderSize) throw ProtocolError("frame shorter than its header (" + std::to_string(len) + " bytes)");
  if (len > max_body) throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                                          std::to_string(max_body));
  return len;
}

}  // namespace crun::wire
