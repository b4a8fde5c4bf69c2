#include "rendezvous/rendezvous_participant.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "base/random_bits.h"
#include "store/store_channel.h"
#include "store/store_connection.h"

namespace crun {

std::string make_node_id(const std::string& hostname) {
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", static_cast<unsigned>(random_bits()));
  return hostname + ":" + std::to_string(::getpid()) + ":" + suffix;
}

namespace {
// The most node statuses node rank 0 reads back (one list_keys answer).
constexpr std::uint32_t kMaxStatusRecords = 4096;

StoreClientOptions with_connect_timeout(StoreClientOptions o, Millis t) {
  o.connect_timeout = t;
  return o;
}

StoreChannel::Clock::time_point after(Millis t) { return StoreChannel::Clock::now() + t; }
}  // namespace

// One connection to the store (StoreChannel, on the owner's loop) carries it all: the control
// watch, the alive key, join and report, heartbeats and statuses.
struct RendezvousParticipant::Impl {
  Impl(boost::asio::io_context& loop, std::unique_ptr<StoreConnection> connected, StoreEndpoint ep,
       StoreClientOptions opt, RendezvousConfig c, NodeRecord s, ParticipantEvents ev)
      : keys(c.run_id),
        cfg(std::move(c)),
        self(std::move(s)),
        node_id(self.node_id),
        events(std::move(ev)),
        timeout(opt.timeout),
        channel(loop, std::move(connected), ep, with_connect_timeout(opt, cfg.join_timeout),
                [this](const std::string& why) { channel_lost(why); }, [this] { on_connected(); }) {}

  // Once, all in the connection's first write: the watch first, so that no control event
  // published after our alive key can be missed; the first heartbeat; a join asked for before
  // the connection.
  void on_connected() {
    if (self.addr.empty()) self.addr = channel.local_address();
    channel.watch(keys.control_prefix(), [this](const StoreEvent& e) { on_control(e); }, after(timeout),
                  [this](std::exception_ptr e) { if (e) lost("cannot watch the coordinator's decisions: " + what(e)); });
    beat();
    connected = true;  // from here on join() writes at once, after the watch
    std::optional<PendingJoin> waiting = std::move(pending_join);
    pending_join.reset();
    if (waiting) send_join(std::move(*waiting));
  }

  void on_control(const StoreEvent& e) {
    if (e.kind != StoreEvent::Kind::kSet) return;
    try {
      ControlEvent ev = ControlEvent::from_json(e.value);
      if (events.on_control) events.on_control(ev);
    } catch (const std::exception& ex) {
      lost(std::string("malformed control record from the coordinator: ") + ex.what());
    }
  }

  // Before the connection: none could be made. A join waiting for it, and any later, fail with
  // that. After: the store is lost.
  void channel_lost(const std::string& why) {
    if (channel.reached()) return lost("the rendezvous store's connection broke: " + why);
    connected = false;  // a refused hello: joins fail as for a store never reached
    unreached = channel.failure();
    if (!unreached) unreached = std::make_exception_ptr(StoreConnectionError(why));
    std::optional<PendingJoin> waiting = std::move(pending_join);
    pending_join.reset();
    if (waiting) fail_unreached(waiting->done, unreached);
  }

  static void fail_unreached(const std::function<void(JoinResult)>& done, std::exception_ptr e) {
    JoinResult r;
    r.error = std::move(e);
    r.reached_store = false;
    done(std::move(r));
  }

  // Only once connected: a store never reached is the join's error (JoinResult::reached_store).
  void lost(const std::string& why) {
    if (!channel.reached()) return;
    if (lost_reported) return;
    lost_reported = true;
    if (events.on_store_lost) events.on_store_lost(why);
  }

  static std::string what(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return ex.what();
    } catch (...) {
      return "unknown error";
    }
  }

  // A heartbeat or a status not taken in time: the store is lost. One the store refuses (too
  // large) is left out, and heartbeats go on.
  void beat_failed(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const StoreRejected&) {
    } catch (const std::exception& ex) {
      lost(std::string("heartbeat failed: ") + ex.what());
    }
  }

  // Every keep_alive_interval from the connection on.
  void beat() {
    channel.set(keys.heartbeat(node_id), std::to_string(beats++), after(cfg.heartbeat_timeout),
                [this](std::exception_ptr e) { if (e) beat_failed(e); });
    if (gather_status) read_job_status();
    channel.at(StoreChannel::Clock::now() + cfg.keep_alive_interval, [this] { beat(); });
  }

  // Every node's published status, bounded by what the store lists in one answer; one reading
  // at a time.
  void read_job_status() {
    if (reading) return;
    reading = true;
    channel.list_keys(keys.status_prefix(), kMaxStatusRecords, after(cfg.heartbeat_timeout),
                      [this](std::exception_ptr e, std::vector<std::string> names) {
      if (e || names.empty()) {
        if (!e) store_job_status({});
        reading = false;
        return;
      }
      auto read = std::make_shared<std::pair<std::size_t, std::vector<std::string>>>(names.size(), std::vector<std::string>{});
      channel.corked([&] {  // every status's request in one write
        for (const auto& key : names) {
          channel.try_get(key, after(cfg.heartbeat_timeout), [this, read](std::exception_ptr, std::optional<std::string> v) {
            if (v) read->second.push_back(std::move(*v));
            if (--read->first == 0) {
              store_job_status(std::move(read->second));
              reading = false;
            }
          });
        }
      });
    });
  }

  void store_job_status(std::vector<std::string> records) { job_status = std::move(records); }

  struct PendingJoin {
    std::function<std::uint16_t(const std::string&)> free_port;
    std::function<void(JoinResult)> done;
  };

  // What the replies to one join's requests came to, as they arrive (in order).
  struct JoinAttempt {
    std::function<void(JoinResult)> done;
    std::string address;
    std::exception_ptr error;  // the first failed request's
    bool finished = false;
    void finish(JoinResult r) {
      if (finished) return;
      finished = true;
      r.address = address;
      done(std::move(r));
    }
  };

  void send_join(PendingJoin j) {
    std::uint32_t seq = 0;
    auto attempt = std::make_shared<JoinAttempt>();
    attempt->done = std::move(j.done);
    self.free_port = j.free_port(self.addr);
    if (state_port) self.state_port = state_port(self.addr);
    seq = ++self.seq;
    const std::string record = self.to_json();
    attempt->address = self.addr;
    auto note = [attempt](std::exception_ptr e) {
      if (e && !attempt->error) attempt->error = e;
    };
    // Alive again first: after an eviction (no heartbeat in time) the coordinator deleted our
    // ephemeral key, and it counts heartbeats only from nodes that are alive.
    channel.set_ephemeral(keys.alive(node_id), self.hostname, after(timeout), note);
    channel.try_get(keys.closed(), after(timeout), [this, attempt, note](std::exception_ptr e, std::optional<std::string> closed) {
      note(e);
      if (!closed) return;
      RoundAnswer a;
      a.closed = true;
      try {
        a.error = "the rendezvous of run '" + cfg.run_id + "' is closed (" + ControlEvent::from_json(*closed).detail + ")";
      } catch (const std::exception&) {  // a closed record we cannot read: closed all the same
        a.error = "the rendezvous of run '" + cfg.run_id + "' is closed";
      }
      JoinResult r;
      r.answer = std::move(a);
      attempt->finish(std::move(r));  // the answer's get stays parked until this agent leaves
    });
    channel.set(keys.join(node_id), record, after(timeout), note);
    channel.get(keys.answer(node_id, seq), cfg.join_timeout, waiting_deadline(cfg.join_timeout),
                [this, attempt](std::exception_ptr e, std::optional<std::string> answer) {
      JoinResult r;
      r.error = attempt->error ? attempt->error : e;
      if (!r.error) {
        try {
          r.answer = RoundAnswer::from_json(*answer);
        } catch (const std::exception&) {
          r.error = std::current_exception();
        }
      } else if (!attempt->error) {
        try {
          std::rethrow_exception(e);
        } catch (const StoreTimeout&) {
          r.error = std::make_exception_ptr(RendezvousTimeout(
              "no round formed within the join timeout of " + std::to_string(cfg.join_timeout.count() / 1000.0).substr(0, 5) +
              " s (run '" + cfg.run_id + "', " + std::to_string(cfg.min_nodes) + " node(s) needed)"));
        } catch (...) {
        }
      }
      if (r.error) r.reached_store = channel.reached();  // a refused hello: as a store never reached
      attempt->finish(std::move(r));
    });
  }

  // The deadline of a request that waits at the server up to `wait`: that, plus slack to answer.
  StoreChannel::Clock::time_point waiting_deadline(Millis wait) const {
    return after(std::max(wait + std::max(Millis(2000), timeout / 10), timeout));
  }

  RendezvousKeys keys;
  RendezvousConfig cfg;
  NodeRecord self;  // addr, seq, free_port change
  const std::string node_id;
  ParticipantEvents events;
  Millis timeout;  // deadline of the rendezvous' requests
  std::uint64_t beats = 0;
  bool reading = false;  // node statuses being read back
  bool lost_reported = false;
  bool connected = false;
  std::exception_ptr unreached;             // why no connection could be made
  std::optional<PendingJoin> pending_join;  // asked for before the connection
  bool gather_status = false;
  std::vector<std::string> job_status;
  std::function<std::uint16_t(const std::string&)> state_port;
  StoreChannel channel;  // last: destroyed first, so no callback reaches the members above
};

RendezvousParticipant::RendezvousParticipant(boost::asio::io_context& loop, std::unique_ptr<StoreConnection> connected,
                                             StoreEndpoint store, StoreClientOptions options, RendezvousConfig config,
                                             NodeRecord self, ParticipantEvents events)
    : impl_(std::make_unique<Impl>(loop, std::move(connected), std::move(store), std::move(options), std::move(config),
                                   std::move(self), std::move(events))) {}

RendezvousParticipant::~RendezvousParticipant() = default;

void RendezvousParticipant::join(std::function<std::uint16_t(const std::string& addr)> free_port,
                                 std::function<void(JoinResult)> done) {
  Impl& m = *impl_;
  Impl::PendingJoin j{std::move(free_port), std::move(done)};
  if (m.unreached) return Impl::fail_unreached(j.done, m.unreached);
  if (!m.connected) {
    m.pending_join = std::move(j);
    return;
  }
  m.channel.corked([&] { m.send_join(std::move(j)); });  // its four requests in one write
}

void RendezvousParticipant::announce_state_port(std::function<std::uint16_t(const std::string&)> state_port) {
  impl_->state_port = std::move(state_port);
}

void RendezvousParticipant::report(int round, const RoundOutcome& outcome) {
  Impl& m = *impl_;
  m.channel.set(m.keys.report(round, m.node_id), outcome.to_json(), after(m.timeout), [&m](std::exception_ptr e) {
    if (e) m.lost("cannot publish this node's outcome: " + Impl::what(e));
  });
}

void RendezvousParticipant::publish_status(std::string status_json, bool gather) {
  Impl& m = *impl_;
  m.gather_status = gather;
  m.channel.set_ephemeral(m.keys.status(m.node_id), status_json, after(m.cfg.heartbeat_timeout),
                          [&m, gather](std::exception_ptr e) {
    if (e) m.beat_failed(e);
    if (gather) m.read_job_status();
  });
}

std::vector<std::string> RendezvousParticipant::job_status() const { return impl_->job_status; }

void RendezvousParticipant::publish_stacks(int round, int node_rank, std::string record, std::function<void(bool)> done) {
  Impl& m = *impl_;
  m.channel.set(m.keys.stacks(round, node_rank), record, after(m.timeout),
                [done = std::move(done)](std::exception_ptr e) { done(!e); });
}

void RendezvousParticipant::await_stacks(int round, int node_rank, std::chrono::milliseconds wait,
                                         std::function<void(std::optional<std::string>)> done) {
  Impl& m = *impl_;
  m.channel.get(m.keys.stacks(round, node_rank), wait, m.waiting_deadline(wait),
                [done = std::move(done)](std::exception_ptr e, std::optional<std::string> v) {
    done(e ? std::nullopt : std::move(v));
  });
}

const std::string& RendezvousParticipant::node_id() const { return impl_->node_id; }
const RendezvousKeys& RendezvousParticipant::keys() const { return impl_->keys; }

}  // namespace crun
