#include "launcher/multi_node_options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "launcher/launch_options.h"
#include "launcher/option_values.h"
#include "store/store_client.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& msg) { throw LaunchUsageError(msg); }

std::chrono::milliseconds seconds_value(const std::string& key, const std::string& v) {
  char* end = nullptr;
  double s = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(s) || s <= 0 || s > 1e7) {
    usage("--rdzv-conf: " + key + " must be a positive number of seconds, got '" + v + "'");
  }
  return std::chrono::milliseconds(static_cast<long long>(s * 1000.0 + 0.5));
}

bool bool_value(const std::string& key, const std::string& v) {
  if (auto b = parse_bool(v)) return *b;
  usage("--rdzv-conf: " + key + " must be true or false (1/0, yes/no, on/off), got '" + v + "'");
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

void apply_conf(const std::string& conf, MultiNodeConfig& m) {
  std::optional<std::chrono::milliseconds> heartbeat_timeout;
  std::optional<long> max_attempts;
  std::size_t pos = 0;
  while (pos <= conf.size()) {
    auto comma = conf.find(',', pos);
    std::string item = trim(conf.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? conf.size() + 1 : comma + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) usage("--rdzv-conf: expected KEY=VALUE, got '" + item + "'");
    std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    RendezvousConfig& r = m.rendezvous;
    if (key == "join_timeout" || key == "timeout") r.join_timeout = seconds_value(key, value);
    else if (key == "last_call_timeout") r.last_call_timeout = seconds_value(key, value);
    else if (key == "close_timeout") r.close_timeout = seconds_value(key, value);
    else if (key == "heartbeat_timeout") heartbeat_timeout = seconds_value(key, value);
    else if (key == "keep_alive_interval") r.keep_alive_interval = seconds_value(key, value);
    else if (key == "read_timeout") m.read_timeout = seconds_value(key, value);
    else if (key == "is_host") m.is_host = bool_value(key, value);
    else if (key == "token") m.token = value;
    else if (key == "use_libuv") bool_value(key, value);
    else if (key == "keep_alive_max_attempt") {
      long n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || n < 1) {
        usage("--rdzv-conf: keep_alive_max_attempt must be a positive integer, got '" + value + "'");
      }
      max_attempts = n;
    } else {
      usage("--rdzv-conf: unknown key '" + key + "'");
    }
  }
  RendezvousConfig& r = m.rendezvous;
  if (heartbeat_timeout) r.heartbeat_timeout = *heartbeat_timeout;
  else if (max_attempts) r.heartbeat_timeout = r.keep_alive_interval * *max_attempts;
  if (r.heartbeat_timeout <= r.keep_alive_interval) {
    usage("--rdzv-conf: heartbeat_timeout must exceed keep_alive_interval");
  }
}

// The program's file name: nodes may pass different arguments (per-node paths), not programs.
std::string program_fingerprint(const std::vector<std::string>& program) {
  return std::filesystem::path(program.front()).filename().string();
}

}  // namespace

std::optional<MultiNodeConfig> make_multi_node(const RendezvousFlags& f, int max_restarts) {
  if (f.backend == "etcd" || f.backend == "etcd-v2") {
    usage("--rdzv-backend " + f.backend + ": not supported (use c10d or static)");
  }
  const bool c10d = f.backend == "c10d";
  if (f.standalone) {
    if (f.max_nodes > 1) usage("--standalone runs one node, but --nnodes asks for up to " + std::to_string(f.max_nodes));
    return std::nullopt;
  }
  if (f.max_nodes == 1 && !(c10d && !f.endpoint.empty())) {
    if (f.node_rank && *f.node_rank != 0) usage("--node-rank: must be 0 for a single-node run, got " + std::to_string(*f.node_rank));
    return std::nullopt;
  }

  MultiNodeConfig m;
  m.rendezvous.run_id = f.run_id;
  m.rendezvous.min_nodes = static_cast<int>(f.min_nodes);
  m.rendezvous.max_nodes = static_cast<int>(f.max_nodes);
  m.rendezvous.max_restarts = max_restarts;
  m.local_addr = f.local_addr;
  m.program = program_fingerprint(f.program);
  if (const char* t = std::getenv("CRUN_RDZV_TOKEN")) m.token = t;
  m.is_host = f.is_host;
  apply_conf(f.conf, m);

  if (c10d) {
    if (f.endpoint.empty()) usage("--rdzv-endpoint: required for a multi-node c10d run (HOST[:PORT])");
    std::string text = f.endpoint;
    bool has_port = text.rfind(':') != std::string::npos && (text.front() != '[' || text.back() != ']');
    if (!has_port) text += ":29400";
    StoreEndpoint ep;
    try {
      ep = StoreEndpoint::parse(text);
    } catch (const std::invalid_argument& e) {
      usage(std::string("--rdzv-endpoint: ") + e.what());
    }
    if (ep.port == 0) usage("--rdzv-endpoint: the port must not be 0");
    m.endpoint_host = ep.host;
    m.endpoint_port = ep.port;
    if (f.node_rank) {
      if (*f.node_rank < 0 || *f.node_rank >= f.max_nodes) {
        usage("--node-rank: must be in [0, " + std::to_string(f.max_nodes) + "), got " + std::to_string(*f.node_rank));
      }
      m.rank_hint = *f.node_rank;
    }
    return m;
  }

  // static
  if (f.min_nodes != f.max_nodes) usage("--nnodes: the static backend needs a fixed node count, got a range");
  if (!f.node_rank) usage("--node-rank: required for a multi-node static run");
  if (*f.node_rank < 0 || *f.node_rank >= f.max_nodes) {
    usage("--node-rank: must be in [0, " + std::to_string(f.max_nodes) + "), got " + std::to_string(*f.node_rank));
  }
  if (f.master_addr.empty()) usage("--master-addr: required for a multi-node static run");
  m.endpoint_host = f.master_addr;
  m.endpoint_port = static_cast<std::uint16_t>(f.master_port.value_or(29500));
  if (m.endpoint_port == 0) usage("--master-port: the static backend needs a fixed port, got 0");
  if (!m.is_host) m.is_host = *f.node_rank == 0;
  m.rank_hint = *f.node_rank;
  return m;
}

}  // namespace crun
