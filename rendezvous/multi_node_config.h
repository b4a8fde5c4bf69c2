// The settings of a multi-node rendezvous, whichever backend keeps it (c10d: crun's store hosted
// by one agent; etcd-v3: an etcd cluster). The launcher fills them in; the agent hands them,
// with this node's part, to the backend.
//
// Contract
//   Plain values; MultiNodeConfig::backend says which of the backend-specific parts applies.
//   this_node_record() builds the node's record from them (one place for both backends).
//
// Threading
//   Value types.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_records.h"
#include "store/store_client.h"

namespace crun {

// etcd-v3: where the cluster is and how to talk to it.
struct EtcdSettings {
  std::vector<StoreEndpoint> endpoints;  // every member (crun fails over between them)
  bool tls = false;                      // protocol=https
  std::string cacert, cert, key;         // PEM files ("" = none / the system's CAs)
  std::string key_prefix = "/crun/";     // every key of run R lives under <key_prefix><R>/
  std::chrono::milliseconds lease_ttl{10000};  // an agent's liveness: its keys go this long after its next keep-alive was due
  std::size_t first_endpoint = 0;  // the member this agent talks to first (one on this host, when there is one)
};

// A multi-node run: the agents meet through the store at `endpoint` (c10d), or through etcd.
struct MultiNodeConfig {
  enum class Backend { kC10d, kEtcdV3 };
  Backend backend = Backend::kC10d;
  StoreEndpoint endpoint{"", 29400};  // c10d and static: the agents' store
  bool is_host = false;         // this agent hosts the store (the launcher decided who does)
  bool join_if_taken = false;   // is_host was inferred (the endpoint is this host's): when its port is
                                // taken, another agent on this host hosts it, and this one joins
  std::string bind_address;     // the local address `endpoint` stands for ("" = none: host on every interface)
  EtcdSettings etcd;            // etcd-v3
  RendezvousConfig rendezvous;  // run id, min/max nodes, max restarts, timeouts
  std::chrono::milliseconds read_timeout{60000};
  std::string token;            // the store's shared secret ("" = none)
  bool store_local_socket = true;  // the store and its clients on this host also use its local socket
                                   // (store/local_socket.h); false (CRUN_STORE_TCP_ONLY=1): TCP alone
  bool workers_use_agent_store = false;  // c10d/static without a token: the workers' store is this one
                                         // (MASTER_ADDR:MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True)
  std::string local_addr;       // the address other nodes reach us at ("" = the store route's)
  int rank_hint = -1;           // --node-rank / SLURM_NODEID
  std::string program;          // compared across nodes
};

// What a multi-node backend needs to know: the run's multi-node settings, and this node.
struct RendezvousNodeConfig {
  MultiNodeConfig multi;
  // This node's part, compared across nodes where NodeRecord says so.
  std::string hostname;
  int nproc_per_node = 1;
  std::string role = "default";
  int max_restarts = 0;
  std::optional<std::uint16_t> master_port;  // nullopt: a free port picked before each join
  // This node's state replication endpoint (agent/state_replication.h), announced in its record:
  // runs once the node's address is known (c10d: on the agent's loop; etcd-v3: on the backend's
  // I/O thread) and returns the port it listens on at that address (0: none). Null: none.
  std::function<std::uint16_t(const std::string& addr)> state_port;
};

// This node's record for either backend: a fresh node id, its address (if given) and the
// configuration every node must share. Its free port is set per join.
NodeRecord this_node_record(const RendezvousNodeConfig& config);

}  // namespace crun
