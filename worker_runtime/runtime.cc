#include "worker_runtime/runtime.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "store/prefix_store.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "worker_runtime/nccl_process_group.h"

namespace crun::rt {

struct Runtime::Impl {
  WorkerEnv env;
  std::unique_ptr<crun::StoreServer> server;
  std::unique_ptr<crun::TcpStore> client;
  std::unique_ptr<crun::PrefixStore> store;
  std::unique_ptr<ProcessGroup> pg;
  std::unique_ptr<crun::PrefixStore> cpu_store;
  std::unique_ptr<ProcessGroup> cpu_pg;  // only when pg is not gloo
  crun::StoreEndpoint endpoint;
  std::string prefix;
  std::mutex hb_mu;  // guards the heartbeat state and its own store connection below
  std::unique_ptr<crun::TcpStore> hb_client;
  std::unique_ptr<crun::PrefixStore> hb_store;
  std::uint64_t hb_count = 0;
  bool hb_warned = false;
  std::chrono::steady_clock::time_point hb_last{};
  std::chrono::milliseconds hb_interval{1000};
};

Runtime::Runtime() : impl_(std::make_unique<Impl>()) {}
Runtime::~Runtime() {
  if (impl_) {
    impl_->pg.reset();
    impl_->cpu_pg.reset();
    impl_->cpu_store.reset();
    impl_->hb_store.reset();
    impl_->hb_client.reset();
    impl_->store.reset();
    impl_->client.reset();
    impl_->server.reset();
  }
}

const WorkerEnv& Runtime::env() const { return impl_->env; }
ProcessGroup& Runtime::pg() { return *impl_->pg; }
ProcessGroup& Runtime::cpu_pg() { return impl_->cpu_pg ? *impl_->cpu_pg : *impl_->pg; }
crun::Store& Runtime::store() { return *impl_->store; }

namespace {
// Gloo's TCP transport writes with writev(), which raises SIGPIPE when a peer has died; a worker
// must get an error it can report, not be killed by the signal (Python ignores SIGPIPE, so torch
// workers never see it). A handler the program installed itself is left alone.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}
}  // namespace

std::unique_ptr<Runtime> Runtime::init(const InitOptions& options) {
  ignore_sigpipe_unless_handled();
  std::unique_ptr<Runtime> rt(new Runtime());
  Impl& s = *rt->impl_;
  s.env = WorkerEnv::from_environment(options.allow_single_process);
  const WorkerEnv& e = s.env;
  const std::string where = "rank " + std::to_string(e.rank) + "/" + std::to_string(e.world_size);
  try {
    std::string host = e.master_addr;
    std::uint16_t port = e.master_port;
    if (e.single_process) {
      crun::StoreServerOptions so;
      so.host = "127.0.0.1";
      so.port = 0;
      s.server = std::make_unique<crun::StoreServer>(so);
      s.server->start();
      port = s.server->port();
    } else if (e.rank == 0 && !e.use_agent_store) {
      crun::StoreServerOptions so;
      so.host = "0.0.0.0";
      so.port = e.master_port;
      s.server = std::make_unique<crun::StoreServer>(so);
      s.server->start();
    }
    crun::StoreClientOptions copts;
    copts.connect_timeout = options.timeout;
    copts.timeout = options.timeout;
    s.endpoint = crun::StoreEndpoint{host, port};
    s.prefix = "crun/restart_" + std::to_string(e.restart_count);
    s.client = std::make_unique<crun::TcpStore>(s.endpoint, copts);
    s.store = std::make_unique<crun::PrefixStore>(*s.client, s.prefix);
  } catch (const std::exception& ex) {
    throw InitError("crun runtime " + where + ": bootstrap store at " + e.master_addr + ":" +
                    std::to_string(e.master_port) + " failed: " + ex.what());
  }

  std::string backend = options.backend;
  if (backend == "auto") backend = nccl_available() ? "nccl" : "gloo";
  GlooOptions g = options.gloo;
  g.timeout = options.timeout;
  if (g.hostname.empty()) {
    if (const char* h = std::getenv("CRUN_GLOO_HOSTNAME")) g.hostname = h;
  }
  if (g.iface.empty()) {
    if (const char* i = std::getenv("GLOO_SOCKET_IFNAME"); i != nullptr && *i != '\0') g.iface = i;
  }
  g.loopback = g.loopback || e.single_process || e.master_is_loopback();
  if (g.hostname.empty() && !g.loopback) g.hostname = s.client->local_address();  // the route to MASTER_ADDR
  if (backend == "gloo") {
    s.pg = make_gloo_process_group(*s.store, e.rank, e.world_size, g);
  } else if (backend == "nccl") {
    s.pg = make_nccl_process_group(*s.store, e.rank, e.world_size, e.local_rank, options.timeout);
    s.cpu_store = std::make_unique<crun::PrefixStore>(*s.client, s.prefix + "/cpu");
    s.cpu_pg = make_gloo_process_group(*s.cpu_store, e.rank, e.world_size, g);
  } else {
    throw InitError("crun runtime: unknown backend '" + backend + "' (gloo, nccl or auto)");
  }
  try {
    s.pg->barrier()->wait();
  } catch (const std::exception& ex) {
    throw InitError("crun runtime " + where + ": first barrier failed: " + ex.what());
  }
  if (const char* iv = std::getenv("CRUN_HEARTBEAT_INTERVAL_MS")) {
    s.hb_interval = std::chrono::milliseconds(std::atol(iv));
  }
  return rt;
}

void Runtime::finish() { impl_->pg->barrier()->wait(); }

void Runtime::heartbeat(std::string_view note) noexcept {
  std::lock_guard lk(impl_->hb_mu);
  ++impl_->hb_count;
  // Rate limit: a store round trip per training step would cost more than the step.
  const auto now = std::chrono::steady_clock::now();
  if (impl_->hb_count > 1 && now - impl_->hb_last < impl_->hb_interval) return;
  impl_->hb_last = now;
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::string value = std::to_string(impl_->hb_count) + " " + std::to_string(now_ms);
  if (!note.empty()) value += " " + std::string(note);
  try {
    if (const char* path = std::getenv("CRUN_HEARTBEAT_FILE"); path != nullptr && *path) {
      std::ofstream(path, std::ios::trunc) << value << "\n";
    }
    if (!impl_->hb_store) {
      crun::StoreClientOptions copts;
      copts.connect_timeout = std::chrono::seconds(5);
      copts.timeout = std::chrono::seconds(5);
      impl_->hb_client = std::make_unique<crun::TcpStore>(impl_->endpoint, copts);
      impl_->hb_store = std::make_unique<crun::PrefixStore>(*impl_->hb_client, impl_->prefix);
    }
    impl_->hb_store->set("heartbeat/" + std::to_string(impl_->env.rank), value);
  } catch (const std::exception& ex) {
    if (!impl_->hb_warned) {
      impl_->hb_warned = true;
      std::fprintf(stderr, "crun runtime: heartbeat not recorded: %s\n", ex.what());
    }
  }
}

}  // namespace crun::rt
