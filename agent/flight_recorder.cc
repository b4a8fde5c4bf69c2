#include "agent/flight_recorder.h"

#include <optional>

namespace crun {

namespace {

std::optional<std::string> value_of(const std::vector<std::string>& env, const std::string& key) {
  const std::string head = key + "=";
  std::optional<std::string> found;
  for (const auto& e : env) {
    if (e.compare(0, head.size(), head) == 0) found = e.substr(head.size());  // the last one wins, as libc reads it
  }
  return found;
}

void set_value(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string head = key + "=";
  std::erase_if(env, [&](const std::string& e) { return e.compare(0, head.size(), head) == 0; });
  env.push_back(head + value);
}

// A whole number, as torch reads it (an optional sign, digits, nothing else but blanks around).
std::optional<long long> whole_number(const std::string& text) {
  std::size_t at = text.find_first_not_of(" \t");
  if (at == std::string::npos) return std::nullopt;
  const std::size_t end = text.find_last_not_of(" \t") + 1;
  bool negative = false;
  if (text[at] == '+' || text[at] == '-') negative = text[at++] == '-';
  if (at == end) return std::nullopt;
  long long value = 0;
  for (; at < end; ++at) {
    if (text[at] < '0' || text[at] > '9') return std::nullopt;
    if (value > 1'000'000'000'000LL) return std::nullopt;  // far past any ring torch could hold
    value = value * 10 + (text[at] - '0');
  }
  return negative ? -value : value;
}

}  // namespace

FlightRecorderSettings read_flight_recorder(const std::vector<std::string>& env) {
  FlightRecorderSettings s;
  for (const char* key : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const auto value = value_of(env, key);
    if (!value) continue;
    const auto n = whole_number(*value);
    if (!n) s.error = std::string(key) + "=" + *value + " is not a whole number";
    s.enabled = n && *n > 0;
    break;
  }
  if (const auto pipe = value_of(env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"); pipe && !pipe->empty()) s.pipe_prefix = *pipe;
  for (const char* key : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}) {
    if (const auto dump = value_of(env, key); dump && !dump->empty()) {
      s.dump_prefix = *dump;
      break;
    }
  }
  return s;
}

void set_flight_recorder(std::vector<std::string>& env, const std::string& pipe_prefix, const std::string& dump_prefix) {
  set_value(env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", pipe_prefix);
  if (!dump_prefix.empty()) set_value(env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", dump_prefix);
}

std::string flight_pipe_file(const std::string& prefix, int rank) { return prefix + std::to_string(rank) + ".pipe"; }

std::string flight_dump_file(const std::string& prefix, int rank) { return prefix + std::to_string(rank); }

}  // namespace crun
