#include "rendezvous/c10d_rendezvous.h"

#include <unistd.h>

#include <mutex>

#include "base/addresses.h"
#include "base/exit_codes.h"
#include "base/log.h"
#include "rendezvous/rendezvous_coordinator.h"
#include "rendezvous/rendezvous_participant.h"
#include "store/store_connection.h"
#include "store/store_server.h"

namespace crun {

namespace {
// How long an agent that may host waits for its connection to a store already listening on its
// own host (loopback answers at once; a full accept queue drops the SYN, retried after 1 s).
constexpr Millis kProbeWait{1500};
// How long an agent whose bind lost waits for the winner to listen (a loaded host can hold an
// agent between its bind and its listen for a while).
constexpr Millis kRaceWait{3000};

}  // namespace

// Shared with the participant's and coordinator's callbacks (weak_ptr: what they post to the loop
// is dropped once the rendezvous is gone).
struct C10dRendezvous::Impl : std::enable_shared_from_this<Impl> {
  Impl(RendezvousNodeConfig c, PostToLoop p, RendezvousListener l, boost::asio::io_context& lp)
      : post_to_loop(std::move(p)), loop(lp), config(std::move(c)), listener(std::move(l)) {
    // The endpoint may be a name (Slurm's first node): bind the local address it stands for.
    const std::string& local = config.multi.bind_address;
    host = config.multi.is_host;
    options.token = config.multi.token;
    options.timeout = config.multi.read_timeout;
    options.connect_timeout = config.multi.rendezvous.join_timeout;
    options.cancel = cancel;
    options.local_socket = config.multi.store_local_socket;
    if (host) {
      StoreServerOptions so;
      so.local_socket = config.multi.store_local_socket;
      so.host = local.empty() ? "0.0.0.0" : local;  // is_host=1 on an address not ours: every interface
      so.port = config.multi.endpoint.port;
      so.token = config.multi.token;
      // Several agents on one endpoint, each inferring it hosts: the first to listen hosts, the
      // others find it listening. One connection attempt says so, and becomes the participant's
      // connection. (A probing bind with SO_REUSEADDR, as the server binds, made the kernel walk
      // every connection the server had accepted on that port: O(agents) each, O(agents^2) in
      // all, ~60 us an agent at 1,024; the attempt is the connection the agent makes anyway.)
      // Refused, or nobody there in time: this agent tries to host, and its bind says who won.
      if (config.multi.join_if_taken && so.port != 0) {
        adopted = StoreConnection::connect_once(StoreEndpoint{so.host, so.port}, options, kProbeWait);
        if (adopted) {
          host = false;
          return;
        }
      }
      try {
        server = std::make_unique<StoreServer>(so);  // listens
        server->start();
      } catch (const StoreAddressInUse&) {
        // Another agent on this host bound the port first (several agents, one endpoint): join
        // it once it listens. When nothing comes to listen, what holds the port is not a store
        // (another program's socket): say so now, not after the join timeout.
        if (!config.multi.join_if_taken) throw;
        server.reset();
        host = false;
        if (!find_listener(so.host, so.port)) {
          throw StoreError("the rendezvous endpoint's port " + so.host + ":" + std::to_string(so.port) +
                           " is in use on this host, but nothing listens there (another program's socket holds "
                           "it): choose another port");
        }
        return;
      }
      if (config.multi.endpoint.port == 0) config.multi.endpoint.port = server->port();  // a free port (one node)
      // The reference configuration, this node's, named in a mismatch before its own join: its
      // address is the endpoint's local one, which its participant will find, unless set.
      // Its node id is this agent's: the coordinator tells the hosting agent's own node apart.
      coordinator_reference = own_record;
      if (coordinator_reference->addr.empty()) coordinator_reference->addr = local;
      coordinator_store = StoreEndpoint{local.empty() ? "127.0.0.1" : local, server->port()};
    }
  }

  // The hosting agent's coordinator, once this Impl is owned by its shared_ptr: the coordinator's
  // thread posts to the loop through weak_from_this(), which is set only after the constructor
  // (started in it, the thread raced that assignment and could drop its first lines).
  void start_coordinator() {
    if (!coordinator_reference) return;
    coordinator = std::make_unique<RendezvousCoordinator>(
        coordinator_store, options, config.multi.rendezvous, [](const std::string& line) { log_line(line); },
        std::move(*coordinator_reference),
        [this](const std::string& why) { post([why](Impl& self) { self.listener.on_store_lost(why); }); },
        // The round's progress is the store host's to print: at 1,024 agents every joiner
        // printing every line made 5,401 lines; a joiner prints its rank (agent.cc).
        [this](const std::string& line) { post([line](Impl& self) { self.listener.on_progress(line); }); });
    coordinator_reference.reset();
  }

  // After a lost bind: the winner's connection for the participant (`adopted`), trying while
  // connections are refused for up to kRaceWait (a winner between its bind and its listen).
  // False only when every attempt was refused; a connection that timed out leaves it to the
  // participant's own retries.
  bool find_listener(const std::string& addr, std::uint16_t port) {
    const auto until = std::chrono::steady_clock::now() + kRaceWait;
    auto pause = Millis(10);
    for (;;) {
      bool refused = false;
      adopted = StoreConnection::connect_once(StoreEndpoint{addr, port}, options, kProbeWait, &refused);
      if (adopted || !refused) return true;
      if (std::chrono::steady_clock::now() + pause > until || cancel->wait_for(pause)) return false;
      pause = std::min(pause * 2, Millis(500));
    }
  }

  // Posts `f` to the agent's loop unless the rendezvous was shut down.
  template <typename F>
  void post(F&& f) {
    post_to_loop([weak = weak_from_this(), f = std::forward<F>(f)]() mutable {
      auto self = weak.lock();
      if (self && !self->stopped) f(*self);
    });
  }

  // On the loop: the participant (the first time: it connects), then a join whose result comes
  // back to the loop.
  void join() {
    std::lock_guard lock(mu);
    if (!participant) make_participant();
    std::weak_ptr<Impl> weak = weak_from_this();
    // The workers' own store needs a port free on this node, unless they share the agents'.
    const bool agent_store = config.multi.workers_use_agent_store;
    const std::uint16_t master_port = config.master_port.value_or(0);
    participant->join(
        [agent_store, master_port](const std::string& addr) -> std::uint16_t {
          if (agent_store) return 0;
          return master_port != 0 ? master_port : pick_free_port(addr);
        },
        [weak](JoinResult r) {
          if (auto s = weak.lock()) s->post([r = std::move(r)](Impl& self) { self.joined(r); });
        });
  }

  void joined(const JoinResult& r) {
    RoundResult result;
    {
      std::lock_guard lock(mu);
      address = r.address;
    }
    if (r.answer) {
      const RoundAnswer& a = *r.answer;
      if (!a.error.empty()) {
        result.error = a.error;
        result.exit_code = a.closed ? kExitRendezvousClosed : kExitRendezvousRejected;
        result.excluded_for = std::chrono::milliseconds(a.excluded_for_ms);
        result.excluded_reason = a.excluded_reason;
      } else {
        result.rendezvous_round = a.round;
        RoundInfo& info = result.info;
        info.restart_count = a.restart_count;
        info.group_rank = a.node_rank;
        info.group_world_size = a.nnodes;
        info.rank_offset = a.node_rank * config.nproc_per_node;
        info.state_endpoints = a.state_endpoints;
        info.world_size = a.nnodes * config.nproc_per_node;
        result.excluded = a.excluded;
        result.exclusions_total = a.exclusions_total;
        if (config.multi.workers_use_agent_store) {  // torchrun's agent store: the workers join the store the agents met at
          info.master_addr = config.multi.endpoint.host;
          info.master_port = config.multi.endpoint.port;
          info.agent_store = true;
        } else {
          info.master_addr = a.master_addr;
          info.master_port = a.master_port;
        }
      }
      listener.on_round(result);
      return;
    }
    try {
      std::rethrow_exception(r.error);
    } catch (const StoreRejected& e) {
      result.error = std::string("rendezvous refused: ") + e.what();
      result.exit_code = kExitRendezvousRejected;
    } catch (const RendezvousTimeout& e) {
      result.error = e.what();
      result.exit_code = kExitRendezvousTimeout;
    } catch (const std::exception& e) {
      if (!r.reached_store) {
        result.error = "no rendezvous store answered at " + config.multi.endpoint.str() +
                       " (is an agent hosting it? the endpoint must be one of its addresses, or pass is_host=1): " +
                       e.what();
        result.exit_code = kExitRendezvousTimeout;
      } else {
        result.error = std::string("rendezvous failed: ") + e.what();
        result.exit_code = kExitStoreLost;
      }
    }
    listener.on_round(result);
  }

  // Under mu.
  void make_participant() {
    ParticipantEvents ev;
    std::weak_ptr<Impl> weak = weak_from_this();
    ev.on_control = [weak](const ControlEvent& e) {
      if (auto s = weak.lock()) s->post([e](Impl& self) { self.listener.on_control(e); });
    };
    ev.on_store_lost = [weak](const std::string& why) {
      if (auto s = weak.lock()) s->post([why](Impl& self) { self.listener.on_store_lost(why); });
    };
    participant = std::make_unique<RendezvousParticipant>(loop, std::move(adopted), config.multi.endpoint, options,
                                                          config.multi.rendezvous, own_record, ev);
    if (config.state_port) participant->announce_state_port(config.state_port);
    node = participant->node_id();
    if (pending_status) participant->publish_status(std::move(pending_status->first), pending_status->second);
    pending_status.reset();
  }

  // An outcome that cannot be delivered leaves nobody to decide the job: the store is lost.
  // Never waits for the store: a report it does not take is the store lost (the participant's event).
  void publish(int round, const RoundOutcome& o) {
    if (participant) participant->report(round, o);
  }

  PostToLoop post_to_loop;
  boost::asio::io_context& loop;  // the agent's: the participant runs there
  RendezvousNodeConfig config;
  NodeRecord own_record = this_node_record(config);  // this node's identity, for the coordinator and the participant
  RendezvousListener listener;
  bool host = false;
  bool stopped = false;
  std::shared_ptr<ConnectCancel> cancel = std::make_shared<ConnectCancel>();
  StoreClientOptions options;
  std::unique_ptr<StoreServer> server;
  std::optional<NodeRecord> coordinator_reference;  // set by the constructor when this agent hosts
  StoreEndpoint coordinator_store;
  std::unique_ptr<RendezvousCoordinator> coordinator;
  std::mutex mu;  // the loop's members read by other threads: node_id(), node_address(), job_status()
  std::unique_ptr<StoreConnection> adopted;  // made when this host's store was found listening; the participant's
  std::unique_ptr<RendezvousParticipant> participant;
  std::string node;
  std::string address;
  std::optional<std::pair<std::string, bool>> pending_status;  // guarded by mu: before the participant
};

C10dRendezvous::C10dRendezvous(RendezvousNodeConfig config, PostToLoop post, RendezvousListener listener,
                               boost::asio::io_context& loop)
    : impl_(std::make_shared<Impl>(std::move(config), std::move(post), std::move(listener), loop)) {
  impl_->start_coordinator();
}

C10dRendezvous::~C10dRendezvous() { shutdown(std::chrono::milliseconds(0)); }

void C10dRendezvous::request_round() { impl_->join(); }

void C10dRendezvous::publish_failure(int rendezvous_round, const RoundOutcome& failure) {
  RoundOutcome o = failure;
  o.succeeded = false;
  impl_->publish(rendezvous_round, o);
}

void C10dRendezvous::publish_success(int rendezvous_round) {
  RoundOutcome o;
  o.succeeded = true;
  impl_->publish(rendezvous_round, o);
}

void C10dRendezvous::shutdown(std::chrono::milliseconds linger) {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.cancel->cancel();  // the coordinator's connections
  {
    std::unique_ptr<RendezvousParticipant> gone;
    {
      std::lock_guard lock(m.mu);
      gone = std::move(m.participant);
    }
    gone.reset();  // our alive key goes with the connection
  }
  if (m.coordinator) {
    // Keep the store up until the other agents have read the close and left.
    if (m.coordinator->closed() && !m.coordinator->wait_until_drained(m.config.multi.rendezvous.close_timeout)) {
      log_line("some agents had not left " + std::to_string(m.config.multi.rendezvous.close_timeout.count() / 1000) +
          " s after the job closed; stopping the store anyway");
    } else if (!m.coordinator->closed() && linger.count() > 0 && !m.coordinator->wait_until_alone(linger)) {
      log_line("some agents had not left " + std::to_string(linger.count() / 1000) + " s after this one; stopping the store");
    }
    m.coordinator.reset();
  }
  if (m.server) m.server->stop();
}

bool C10dRendezvous::is_host() const { return impl_->host; }
std::string C10dRendezvous::node_id() const {
  std::lock_guard lock(impl_->mu);
  return impl_->node;
}
std::string C10dRendezvous::node_address() const {
  std::lock_guard lock(impl_->mu);
  return impl_->address;
}
void C10dRendezvous::publish_status(std::string status_json, bool gather) {
  std::lock_guard lock(impl_->mu);
  if (impl_->stopped) return;
  // A node that has not joined (its node checks fail: agent/node_checks.h) still shows in node
  // rank 0's view: its participant connects now, for the status alone (no alive key, no join).
  if (!impl_->participant) impl_->make_participant();
  impl_->participant->publish_status(std::move(status_json), gather);
}

// Kept with the round's keys: pruned by the coordinator two rounds later, or gone with the store
// once the job closed and every agent left; longer than any `keep_for`.
void C10dRendezvous::publish_stacks(int rendezvous_round, int node_rank, std::string record, std::chrono::milliseconds,
                                    std::function<void(bool)> done) {
  std::lock_guard lock(impl_->mu);
  if (impl_->stopped || !impl_->participant) return impl_->post_to_loop([done = std::move(done)] { done(false); });
  impl_->participant->publish_stacks(rendezvous_round, node_rank, std::move(record), std::move(done));
}

void C10dRendezvous::await_stacks(int rendezvous_round, int node_rank, std::chrono::milliseconds wait,
                                  std::function<void(std::optional<std::string>)> done) {
  std::lock_guard lock(impl_->mu);
  if (impl_->stopped || !impl_->participant) return impl_->post_to_loop([done = std::move(done)] { done(std::nullopt); });
  impl_->participant->await_stacks(rendezvous_round, node_rank, wait, std::move(done));
}

std::vector<std::string> C10dRendezvous::job_status() const {
  std::lock_guard lock(impl_->mu);
  return impl_->participant ? impl_->participant->job_status() : std::vector<std::string>{};
}

std::string C10dRendezvous::store_endpoint() const {
  return impl_->config.multi.endpoint.str();
}

}  // namespace crun
