#include "rendezvous/rendezvous_participant.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "base/random_bits.h"
#include "store/store_channel.h"

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

// One connection to the store (StoreChannel) carries it all: the control watch, the alive key,
// join and report, heartbeats and statuses; its reader thread delivers the watch's events.
struct RendezvousParticipant::Impl {
  Impl(StoreEndpoint ep, StoreClientOptions opt, RendezvousConfig c, NodeRecord s, ParticipantEvents ev)
      : keys(c.run_id),
        cfg(std::move(c)),
        self(std::move(s)),
        events(std::move(ev)),
        timeout(opt.timeout),
        channel(ep, with_connect_timeout(opt, cfg.join_timeout),
                [this](const std::string& why) { lost("the rendezvous store's connection broke: " + why); }) {
    if (self.addr.empty()) self.addr = channel.local_address();
    // Watch first, so no control event published after our alive key can be missed.
    channel.watch(keys.control_prefix(), [this](const StoreEvent& e) { on_control(e); }, after(timeout));
    channel.set_ephemeral(keys.alive(self.node_id), self.hostname, after(timeout));
    channel.set(keys.heartbeat(self.node_id), "0", after(cfg.heartbeat_timeout));
    heartbeat = std::thread([this] { beat(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(beat_mu);
      stopping = true;
      beat_cv.notify_all();
    }
    heartbeat.join();  // the channel (the last member) closes after this
  }

  void on_control(const StoreEvent& e) {
    if (e.kind != StoreEvent::Kind::kSet) return;
    if (e.key == keys.progress()) {
      if (events.on_progress) events.on_progress(e.value);
      return;
    }
    try {
      ControlEvent ev = ControlEvent::from_json(e.value);
      if (events.on_control) events.on_control(ev);
    } catch (const std::exception& ex) {
      lost(std::string("malformed control record from the coordinator: ") + ex.what());
    }
  }

  void lost(const std::string& why) {
    if (stopping || lost_reported.exchange(true)) return;
    if (events.on_store_lost) events.on_store_lost(why);
  }

  // Heartbeats every keep_alive_interval; between them, as soon as the agent hands one over,
  // this node's status for operators (and, when gathering, every node's status read back). Each
  // must be answered within heartbeat_timeout.
  void beat() {
    std::uint64_t n = 0;
    auto next_beat = std::chrono::steady_clock::now() + cfg.keep_alive_interval;
    std::unique_lock lock(beat_mu);
    while (true) {
      beat_cv.wait_until(lock, next_beat, [&] { return stopping.load() || status_dirty; });
      if (stopping) return;
      const bool due = std::chrono::steady_clock::now() >= next_beat;
      std::optional<std::string> status;
      if (status_dirty) status = status_json;
      status_dirty = false;
      const bool gather = gather_status;
      lock.unlock();
      try {
        if (due) {
          channel.set(keys.heartbeat(self.node_id), std::to_string(++n), after(cfg.heartbeat_timeout));
          next_beat = std::chrono::steady_clock::now() + cfg.keep_alive_interval;
        }
        if (status) channel.set_ephemeral(keys.status(self.node_id), *status, after(cfg.heartbeat_timeout));
        if (gather && (due || status)) read_job_status();
      } catch (const StoreTimeout& e) {
        lost(std::string("heartbeat failed: ") + e.what());
        return;
      } catch (const StoreRejected& e) {
        // A record the store refuses (too large) is left out; heartbeats go on.
      } catch (const StoreError& e) {
        lost(std::string("heartbeat failed: ") + e.what());
        return;
      }
      lock.lock();
    }
  }

  // Every node's published status, bounded by what the store lists in one answer.
  void read_job_status() {
    auto names = channel.list_keys(keys.status_prefix(), kMaxStatusRecords, after(cfg.heartbeat_timeout));
    std::vector<std::string> records;
    for (const auto& key : names) {
      if (auto value = channel.try_get(key, after(cfg.heartbeat_timeout))) records.push_back(std::move(*value));
    }
    std::lock_guard guard(job_mu);
    job_status = std::move(records);
  }

  // The deadline of a request that waits at the server up to `wait`: that, plus slack to answer.
  StoreChannel::Clock::time_point waiting_deadline(Millis wait) const {
    return after(std::max(wait + std::max(Millis(2000), timeout / 10), timeout));
  }

  RendezvousKeys keys;
  RendezvousConfig cfg;
  NodeRecord self;
  ParticipantEvents events;
  Millis timeout;       // deadline of join's and report's requests
  std::mutex join_mu;   // join() and report(): one at a time
  std::atomic<bool> aborted{false};
  std::thread heartbeat;
  std::mutex beat_mu;
  std::condition_variable beat_cv;
  std::atomic<bool> stopping{false};
  std::string status_json;     // guarded by beat_mu: the newest status handed over
  bool status_dirty = false;   // guarded by beat_mu: not yet written
  bool gather_status = false;  // guarded by beat_mu
  std::mutex job_mu;
  std::vector<std::string> job_status;  // guarded by job_mu
  std::atomic<bool> lost_reported{false};
  bool announced = true;  // guarded by join_mu: the alive key was just written (the constructor)
  StoreChannel channel;   // last: its reader thread calls into the members above until it closes
};

RendezvousParticipant::RendezvousParticipant(StoreEndpoint store, StoreClientOptions options, RendezvousConfig config,
                                             NodeRecord self, ParticipantEvents events)
    : impl_(std::make_unique<Impl>(std::move(store), std::move(options), std::move(config), std::move(self),
                                   std::move(events))) {}

RendezvousParticipant::~RendezvousParticipant() = default;

RoundAnswer RendezvousParticipant::join(std::uint16_t free_port) {
  Impl& m = *impl_;
  std::lock_guard lock(m.join_mu);
  if (auto closed = m.channel.try_get(m.keys.closed(), after(m.timeout), &m.aborted)) {
    RoundAnswer a;
    a.closed = true;
    a.error = "the rendezvous of run '" + m.cfg.run_id + "' is closed (" + ControlEvent::from_json(*closed).detail + ")";
    return a;
  }
  ++m.self.seq;
  m.self.free_port = free_port;
  // Alive again first: after an eviction (no heartbeat in time) the coordinator deleted our
  // ephemeral key, and it counts heartbeats only from nodes that are alive. The first join
  // follows the constructor's announcement at once: one request fewer per agent.
  if (!m.announced) m.channel.set_ephemeral(m.keys.alive(m.self.node_id), m.self.hostname, after(m.timeout), &m.aborted);
  m.announced = false;
  m.channel.set(m.keys.join(m.self.node_id), m.self.to_json(), after(m.timeout), &m.aborted);
  try {
    return RoundAnswer::from_json(m.channel.get(m.keys.answer(m.self.node_id, m.self.seq), m.cfg.join_timeout,
                                                m.waiting_deadline(m.cfg.join_timeout), &m.aborted));
  } catch (const StoreTimeout&) {
    throw RendezvousTimeout("no round formed within the join timeout of " +
                            std::to_string(m.cfg.join_timeout.count() / 1000.0).substr(0, 5) + " s (run '" +
                            m.cfg.run_id + "', " + std::to_string(m.cfg.min_nodes) + " node(s) needed)");
  }
}

void RendezvousParticipant::report(int round, const RoundOutcome& outcome) {
  Impl& m = *impl_;
  std::lock_guard lock(m.join_mu);
  m.channel.set(m.keys.report(round, m.self.node_id), outcome.to_json(), after(m.timeout), &m.aborted);
}

void RendezvousParticipant::publish_status(std::string status_json, bool gather) {
  Impl& m = *impl_;
  std::lock_guard lock(m.beat_mu);
  m.status_json = std::move(status_json);
  m.status_dirty = true;
  m.gather_status = gather;
  m.beat_cv.notify_all();
}

std::vector<std::string> RendezvousParticipant::job_status() const {
  std::lock_guard lock(impl_->job_mu);
  return impl_->job_status;
}

void RendezvousParticipant::abort() {
  impl_->aborted = true;
  impl_->channel.wake();
}

const NodeRecord& RendezvousParticipant::self() const { return impl_->self; }
const RendezvousKeys& RendezvousParticipant::keys() const { return impl_->keys; }

}  // namespace crun
