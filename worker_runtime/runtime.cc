#include "worker_runtime/runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/heartbeat_file.h"
#include "store/prefix_store.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "store/torch_keys.h"
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
  std::int64_t* heartbeat = nullptr;  // CRUN_HEARTBEAT_FILE mapped: [0] step, [1] monotonic ns
};

Runtime::Runtime() : impl_(std::make_unique<Impl>()) {}
Runtime::~Runtime() {
  if (impl_) {
    impl_->pg.reset();
    impl_->cpu_pg.reset();
    impl_->cpu_store.reset();
    if (impl_->heartbeat != nullptr) ::munmap(impl_->heartbeat, kHeartbeatFileBytes);
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
// The agent's heartbeat file (base/heartbeat_file.h) mapped into memory, or nullptr when crun
// does not watch for hangs; a file that cannot be mapped is reported once and leaves heartbeats off.
std::int64_t* map_heartbeat_file(const std::string& where) {
  const char* path = std::getenv(kHeartbeatFileVariable);
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, kHeartbeatFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "crun runtime %s: heartbeats off: cannot map %s=%s: %s\n", where.c_str(), kHeartbeatFileVariable,
                 path, std::strerror(err));
    return nullptr;
  }
  return static_cast<std::int64_t*>(p);
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
    // CRUN_STORE_TCP_ONLY=1 (docs/store-protocol.md): the bootstrap store and its clients on TCP alone.
    const char* tcp_only = std::getenv("CRUN_STORE_TCP_ONLY");
    const bool local_socket = tcp_only == nullptr || std::strcmp(tcp_only, "1") != 0;
    if (e.single_process) {
      crun::StoreServerOptions so;
      so.local_socket = local_socket;
      so.host = "127.0.0.1";
      so.port = 0;
      s.server = std::make_unique<crun::StoreServer>(so);
      s.server->start();
      port = s.server->port();
    } else if (e.rank == 0 && !e.use_agent_store) {
      crun::StoreServerOptions so;
      so.host = "0.0.0.0";
      so.port = e.master_port;
      so.local_socket = local_socket;
      s.server = std::make_unique<crun::StoreServer>(so);
      s.server->start();
    }
    crun::StoreClientOptions copts;
    copts.connect_timeout = options.timeout;
    copts.local_socket = local_socket;
    copts.timeout = options.timeout;
    s.endpoint = crun::StoreEndpoint{host, port};
    s.prefix = options.key_prefix.empty() ? crun::torch_worker_prefix(e.restart_count) : options.key_prefix;
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
  s.heartbeat = map_heartbeat_file(where);
  return rt;
}

void Runtime::finish() { impl_->pg->barrier()->wait(); }

void Runtime::heartbeat(std::int64_t step) noexcept {
  std::int64_t* slot = impl_->heartbeat;
  if (slot == nullptr) return;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const std::int64_t ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  std::atomic_ref<std::int64_t>(slot[0]).store(step, std::memory_order_relaxed);
  std::atomic_ref<std::int64_t>(slot[1]).store(ns, std::memory_order_release);
}

}  // namespace crun::rt
