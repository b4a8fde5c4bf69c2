#include "launcher/multi_node_options.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

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

// A readable file, for a TLS setting.
std::string file_value(const std::string& key, const std::string& v) {
  std::error_code ec;
  if (v.empty() || !std::filesystem::is_regular_file(v, ec) || ::access(v.c_str(), R_OK) != 0) {
    usage("--rdzv-conf: " + key + " must name a readable file, got '" + v + "'");
  }
  return v;
}

// The etcd-v3 keys of --rdzv-conf; false when `key` is not one of them.
bool apply_etcd_conf(const std::string& key, const std::string& value, EtcdSettings& e) {
  if (key == "protocol") {
    if (value != "http" && value != "https") usage("--rdzv-conf: protocol must be http or https, got '" + value + "'");
    e.tls = value == "https";
  } else if (key == "cacert") {
    e.cacert = file_value(key, value);
  } else if (key == "cert") {
    e.cert = file_value(key, value);
  } else if (key == "key") {
    e.key = file_value(key, value);
  } else if (key == "key_prefix") {
    if (value.empty()) usage("--rdzv-conf: key_prefix must not be empty");
    e.key_prefix = value;
  } else if (key == "lease_ttl") {
    long n = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || p != value.data() + value.size() || n < 2 || n > 86400) {
      usage("--rdzv-conf: lease_ttl must be a whole number of seconds in [2, 86400], got '" + value + "'");
    }
    e.lease_ttl = std::chrono::seconds(n);
  } else {
    return false;
  }
  return true;
}

// Applies --rdzv-conf; returns its is_host, if it has one.
std::optional<bool> apply_conf(const std::vector<std::pair<std::string, std::string>>& conf, MultiNodeConfig& m) {
  const bool etcd = m.backend == MultiNodeConfig::Backend::kEtcdV3;
  std::optional<std::chrono::milliseconds> heartbeat_timeout;
  std::optional<long> max_attempts;
  std::optional<bool> is_host;
  RendezvousConfig& r = m.rendezvous;
  for (const auto& [key, value] : conf) {
    if (etcd && apply_etcd_conf(key, value, m.etcd)) continue;
    if (etcd && (key == "is_host" || key == "token")) {
      usage("--rdzv-conf: " + key + " is a c10d setting; etcd-v3 has no host and uses etcd's TLS and auth");
    }
    if (etcd && (key == "heartbeat_timeout" || key == "keep_alive_interval" || key == "keep_alive_max_attempt" ||
                 key == "read_timeout")) {
      usage("--rdzv-conf: " + key + " is a c10d setting; etcd-v3's liveness is its lease: use lease_ttl");
    }
    if (key == "join_timeout" || key == "timeout") r.join_timeout = seconds_value(key, value);
    else if (key == "last_call_timeout") r.last_call_timeout = seconds_value(key, value);
    else if (key == "close_timeout") r.close_timeout = seconds_value(key, value);
    else if (key == "heartbeat_timeout") heartbeat_timeout = seconds_value(key, value);
    else if (key == "keep_alive_interval") r.keep_alive_interval = seconds_value(key, value);
    else if (key == "read_timeout") m.read_timeout = seconds_value(key, value);
    else if (key == "is_host") is_host = bool_value(key, value);
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
      usage("--rdzv-conf: unknown key '" + key + "'" +
            (etcd ? std::string() : " (protocol, cacert, cert, key, key_prefix and lease_ttl are etcd-v3's)"));
    }
  }
  if (etcd && !m.etcd.tls && (!m.etcd.cacert.empty() || !m.etcd.cert.empty() || !m.etcd.key.empty())) {
    usage("--rdzv-conf: cacert, cert and key need protocol=https");
  }
  if (etcd && m.etcd.cert.empty() != m.etcd.key.empty()) usage("--rdzv-conf: cert and key go together");
  if (heartbeat_timeout) r.heartbeat_timeout = *heartbeat_timeout;
  else if (max_attempts) r.heartbeat_timeout = r.keep_alive_interval * *max_attempts;
  if (r.heartbeat_timeout <= r.keep_alive_interval) {
    usage("--rdzv-conf: heartbeat_timeout must exceed keep_alive_interval");
  }
  return is_host;
}

// The numeric local address `name` stands for (itself for an IP literal, the first of its
// resolved addresses that is local for a name), or "" when it is not this host. A loopback
// literal (127.0.0.0/8, ::1) is this host without asking: listing the host's addresses costs a
// netlink dump (~50 us), which 1,024 agents sharing 127.0.0.1 would each pay.
std::string address_on_host(const std::string& name, const HostFacts& host) {
  const auto mine = [&](const std::string& a) {
    const auto& ours = host.addresses.get();
    return std::find(ours.begin(), ours.end(), a) != ours.end();
  };
  in_addr v4;
  in6_addr v6;
  if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    const bool loopback = (ntohl(v4.s_addr) >> 24) == 127;
    return loopback || mine(name) ? name : std::string();
  }
  if (::inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) || mine(name) ? name : std::string();
  }
  if (!host.resolve) return {};
  for (const auto& a : host.resolve(name)) {
    if (mine(a)) return a;
  }
  return {};
}

// The program's file name: nodes may pass different arguments (per-node paths), not programs.
std::string program_fingerprint(const std::vector<std::string>& program) {
  return std::filesystem::path(program.front()).filename().string();
}

void check_node_rank(int rank, long max_nodes) {
  if (rank < 0 || rank >= max_nodes) {
    usage("--node-rank: must be in [0, " + std::to_string(max_nodes) + "), got " + std::to_string(rank));
  }
}

// --rdzv-endpoint HOST[:PORT],... -> every etcd member; the first one on this host is tried
// first (an agent beside its member keeps working when another host's member goes).
void etcd_endpoints(const RendezvousFlags& f, const HostFacts& host, EtcdSettings& e) {
  if (f.endpoint.empty()) usage("--rdzv-endpoint: required for etcd-v3 (HOST[:PORT],... of every etcd member)");
  std::size_t start = 0;
  while (start <= f.endpoint.size()) {
    std::size_t comma = f.endpoint.find(',', start);
    if (comma == std::string::npos) comma = f.endpoint.size();
    std::string item = f.endpoint.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) usage("--rdzv-endpoint: an empty member in '" + f.endpoint + "'");
    const bool has_port = item.rfind(':') != std::string::npos && (item.front() != '[' || item.back() != ']');
    if (!has_port) item += ":2379";
    try {
      e.endpoints.push_back(StoreEndpoint::parse(item));
    } catch (const std::invalid_argument& ex) {
      usage(std::string("--rdzv-endpoint: ") + ex.what());
    }
    if (e.endpoints.back().port == 0) usage("--rdzv-endpoint: the port must not be 0 (" + item + ")");
  }
  for (std::size_t i = 0; i < e.endpoints.size(); ++i) {
    if (!address_on_host(e.endpoints[i].host, host).empty()) {
      e.first_endpoint = i;
      return;
    }
  }
  e.first_endpoint = std::hash<std::string>{}(host.hostname) % e.endpoints.size();
}

}  // namespace

std::optional<MultiNodePlan> make_multi_node(const RendezvousFlags& f, int max_restarts, const HostFacts& host) {
  const bool c10d = f.backend == RendezvousBackend::kC10d;
  const bool etcd = f.backend == RendezvousBackend::kEtcdV3;
  if (f.standalone) {
    if (f.max_nodes > 1) usage("--standalone runs one node, but --nnodes asks for up to " + std::to_string(f.max_nodes));
    return std::nullopt;
  }
  const bool one_node_static = f.backend == RendezvousBackend::kStatic && f.static_asked;
  if (f.max_nodes == 1 && !((c10d || etcd) && !f.endpoint.empty()) && !one_node_static) {
    if (f.node_rank && *f.node_rank != 0) usage("--node-rank: must be 0 for a single-node run, got " + std::to_string(*f.node_rank));
    return std::nullopt;
  }

  MultiNodePlan plan;
  MultiNodeConfig& m = plan.config;
  m.rendezvous.run_id = f.run_id;
  m.rendezvous.min_nodes = static_cast<int>(f.min_nodes);
  m.rendezvous.max_nodes = static_cast<int>(f.max_nodes);
  m.rendezvous.max_restarts = max_restarts;
  m.rendezvous.exclude_after = f.exclude_after;
  m.rendezvous.exclude_cooldown = f.exclude_cooldown;
  m.local_addr = f.local_addr;
  m.program = program_fingerprint(f.program);
  m.token = f.token;
  if (etcd) m.backend = MultiNodeConfig::Backend::kEtcdV3;
  const std::optional<bool> conf_host = apply_conf(f.conf, m);
  // torchrun's agent store: workers share the store the agents meet at (MASTER_PORT is its port).
  // Not with a token: torch's clients cannot present one. etcd-v3 has no agents' store.
  m.workers_use_agent_store = !etcd && m.token.empty() && f.share_store;

  if (etcd) {
    etcd_endpoints(f, host, m.etcd);
    plan.endpoint_source = f.endpoint_source;
    if (f.node_rank) {
      check_node_rank(*f.node_rank, f.max_nodes);
      m.rank_hint = *f.node_rank;
    }
    plan.host_source = "none (etcd-v3)";
    return plan;
  }
  if (c10d) {
    if (f.endpoint.empty()) usage("--rdzv-endpoint: required for a multi-node c10d run (HOST[:PORT])");
    std::string text = f.endpoint;
    const bool has_port = text.rfind(':') != std::string::npos && (text.front() != '[' || text.back() != ']');
    if (!has_port) text += ":29400";
    try {
      m.endpoint = StoreEndpoint::parse(text);
    } catch (const std::invalid_argument& e) {
      usage(std::string("--rdzv-endpoint: ") + e.what());
    }
    // Port 0 (torchrun's way to stack single-node jobs): this node hosts on a free port.
    if (m.endpoint.port == 0 && f.max_nodes > 1) {
      usage("--rdzv-endpoint: port 0 (a free port) works only for one node (--nnodes 1): other nodes could not find it");
    }
    plan.endpoint_source = f.endpoint_source;
    if (f.node_rank) {
      check_node_rank(*f.node_rank, f.max_nodes);
      m.rank_hint = *f.node_rank;
    }
  } else {
    if (f.min_nodes != f.max_nodes) usage("--nnodes: the static backend needs a fixed node count, got a range");
    // One node: torchrun's defaults (node rank 0, the store at 127.0.0.1:29500).
    const bool one = f.max_nodes == 1;
    if (!f.node_rank && !one) usage("--node-rank: required for a multi-node static run");
    check_node_rank(f.node_rank.value_or(0), f.max_nodes);
    if (f.master_addr.empty() && !one) usage("--master-addr: required for a multi-node static run");
    m.endpoint = StoreEndpoint{f.master_addr.empty() ? "127.0.0.1" : f.master_addr,
                               static_cast<std::uint16_t>(f.master_port.value_or(29500))};
    if (m.endpoint.port == 0) usage("--master-port: the static backend needs a fixed port, got 0");
    plan.endpoint_source = "master_addr:master_port";
    m.rank_hint = f.node_rank.value_or(0);
  }

  m.bind_address = address_on_host(m.endpoint.host, host);
  if (c10d && m.endpoint.port == 0 && m.bind_address.empty()) {
    usage("--rdzv-endpoint: port 0 means hosting on a free port here, but " + m.endpoint.host + " is not this host");
  }
  if (conf_host) {
    m.is_host = *conf_host;
    plan.host_source = "--rdzv-conf is_host";
  } else if (f.is_host) {
    m.is_host = f.is_host->value;
    plan.host_source = f.is_host->source;
  } else if (!c10d) {
    m.is_host = m.rank_hint == 0;
    plan.host_source = "node rank 0 (static)";
  } else {
    m.is_host = !m.bind_address.empty();
    m.join_if_taken = m.is_host;  // several agents on one host: the first to listen hosts
    plan.host_source = "the endpoint is " + std::string(m.is_host ? "" : "not ") + "one of this host's addresses" +
                       (m.is_host ? " (the first agent here to listen on it; the others join)" : "");
  }
  return plan;
}

}  // namespace crun
