#include "rendezvous/rendezvous_coordinator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "base/quiet_thread.h"
#include "rendezvous/coordinator_core.h"
#include "store/blocking_store_channel.h"
#include "store/torch_keys.h"

namespace crun {

namespace {
using Clock = CoordinatorClock;
}  // namespace

struct RendezvousCoordinator::Impl {
  Impl(StoreEndpoint ep, StoreClientOptions opt, RendezvousConfig c, std::function<void(const std::string&)> l,
       std::optional<NodeRecord> ref, std::function<void(const std::string&)> failed_cb,
       std::function<void(const std::string&)> progress_cb)
      : keys(c.run_id), core(std::move(c), std::move(ref)), log(std::move(l)), on_failed(std::move(failed_cb)),
        on_progress(std::move(progress_cb)), store(ep, opt) {
    core.set_wall_offset(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch() - CoordinatorClock::now().time_since_epoch()));
    // What the core reads, and only that: the answers, prunes and decisions this coordinator
    // writes itself (two or three per node and round) do not come back to it.
    watches = std::make_unique<BlockingStoreChannel>(ep, opt, [this](const std::string& why) {
      std::lock_guard lock(mu);
      lost = why;
      events_cv.notify_all();
      state_cv.notify_all();
    });
    const auto deadline = BlockingStoreChannel::Clock::now() + opt.timeout;
    for (const auto& prefix : {keys.join_prefix(), keys.alive_prefix(), keys.heartbeat_prefix(), keys.report_prefix()}) {
      watches->watch(prefix, [this](const StoreEvent& e) { push(e); }, deadline);
    }
    thread = quiet_thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
      events_cv.notify_all();
    }
    thread.join();
    watches.reset();
  }

  void push(const StoreEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
    events_cv.notify_one();
  }

  // --- the coordinator thread -------------------------------------------------------------

  void run() {
    try {
      // Records written before the watch existed (a fast agent) are read once; handlers are idempotent.
      for (const std::string& key : store.list_keys(keys.base, 1u << 20)) {
        if (auto v = store.try_get(key)) handle(StoreEvent{StoreEvent::Kind::kSet, key, *v});
      }
      flush_prunes();
      for (;;) {
        std::deque<StoreEvent> batch;
        {
          std::unique_lock lock(mu);
          auto deadline = Clock::now() + std::chrono::seconds(3600);
          if (auto due = core.next_deadline()) deadline = std::min(deadline, *due);
          events_cv.wait_until(lock, deadline, [&] { return stopping || !events.empty() || !lost.empty(); });
          if (stopping) return;
          if (!lost.empty()) throw StoreConnectionError("its watch connection broke: " + lost);
          batch.swap(events);
        }
        for (auto& e : batch) handle(e);
        apply(core.on_timers(Clock::now()));
        flush_prunes();
        publish_drained();
      }
    } catch (const std::exception& e) {
      log(std::string("rendezvous coordinator stopped: ") + e.what());
      {
        std::lock_guard lock(mu);
        failed = true;
        state_cv.notify_all();
      }
      if (on_failed) on_failed(std::string("the rendezvous coordinator stopped: ") + e.what());
    }
  }

  // Parses one store event into the core's event; malformed records of peers are logged and
  // ignored, store errors go up to run().
  void handle(const StoreEvent& e) {
    std::string_view rest(e.key);
    rest.remove_prefix(keys.base.size());
    auto take = [&](std::string_view p) {
      if (!rest.starts_with(p)) return false;
      rest.remove_prefix(p.size());
      return true;
    };
    const bool set = e.kind == StoreEvent::Kind::kSet;
    auto now = Clock::now();
    try {
      if (take("join/")) {
        if (set) apply(core.on_join(NodeRecord::from_json(e.value), now));
      } else if (take("alive/")) {
        std::string node(rest);
        apply(set ? core.on_alive(node, now) : core.on_alive_gone(node, now));
      } else if (take("hb/")) {
        if (set) apply(core.on_heartbeat(std::string(rest), now));
      } else if (take("report/")) {
        auto slash = rest.find('/');
        if (!set || slash == std::string_view::npos) return;
        int r = std::stoi(std::string(rest.substr(0, slash)));
        std::string node(rest.substr(slash + 1));
        std::optional<RoundOutcome> outcome;
        std::string malformed;
        try {
          outcome = RoundOutcome::from_json(e.value);
        } catch (const std::invalid_argument& ex) {
          malformed = ex.what();
        }
        apply(core.on_report(r, node, outcome, now));
        if (!outcome) log("rendezvous: ignored a malformed record at '" + e.key + "': " + malformed);
      }
    } catch (const std::invalid_argument& ex) {
      log("rendezvous: ignored a malformed record at '" + e.key + "': " + ex.what());
    }
  }

  // Carries out the core's effects in order; prunes wait for the batch's flush_prunes().
  void apply(CoordinatorEffects effects) {
    namespace fx = coordinator_effect;
    for (auto& effect : effects) {
      if (auto* a = std::get_if<fx::Answer>(&effect)) {
        if (a->entries.size() == 1) {
          store.set(keys.answer(a->entries[0].node_id, a->entries[0].seq), a->entries[0].answer.to_json());
          continue;
        }
        std::vector<std::string> answer_keys, answer_values;
        for (const auto& entry : a->entries) {
          answer_keys.push_back(keys.answer(entry.node_id, entry.seq));
          answer_values.push_back(entry.answer.to_json());
        }
        store.multi_set(answer_keys, answer_values);
      } else if (auto* c = std::get_if<fx::Control>(&effect)) {
        const bool stop = c->event.kind == ControlEvent::Kind::kStop;
        store.set(stop ? keys.stop(c->event.round) : keys.closed(), c->event.to_json());
      } else if (std::holds_alternative<fx::Closed>(effect)) {
        std::lock_guard lock(mu);
        job_closed = true;
      } else if (auto* p = std::get_if<fx::Progress>(&effect)) {
        if (on_progress) on_progress(p->line);
      } else if (auto* end = std::get_if<fx::EndAlive>(&effect)) {
        store.remove(keys.alive(end->node_id));
      } else if (auto* prune = std::get_if<fx::Prune>(&effect)) {
        prunes.push_back(std::move(prune->key));
      } else if (auto* round = std::get_if<fx::PruneRound>(&effect)) {
        for (auto& key : store.list_keys(keys.round_prefix(round->round), 1u << 20)) prunes.push_back(std::move(key));
      } else if (std::holds_alternative<fx::ClearWorkerKeys>(effect)) {
        auto p = store.pipeline();
        for (auto& key : store.list_keys(torch_workers_root(), 1u << 20)) p.remove(key);
        p.flush();
      } else if (auto* line = std::get_if<fx::Log>(&effect)) {
        log(line->line);
      }
    }
  }

  // Deletes what no agent can still need, in one pipelined batch.
  void flush_prunes() {
    if (prunes.empty()) return;
    auto p = store.pipeline();
    for (const auto& key : prunes) p.remove(key);
    prunes.clear();
    p.flush();
  }

  // Tells waiters whether any participant is still connected (drained = closed and alone).
  void publish_drained() {
    const bool now_alone = core.alone();
    if (now_alone == alone) return;
    std::lock_guard lock(mu);
    alone = now_alone;
    state_cv.notify_all();
  }

  RendezvousKeys keys;
  CoordinatorCore core;  // touched by the coordinator thread only
  std::function<void(const std::string&)> log;
  std::function<void(const std::string&)> on_failed;
  std::function<void(const std::string&)> on_progress;
  TcpStore store;
  std::unique_ptr<BlockingStoreChannel> watches;  // one connection, its own thread: the four watches
  std::thread thread;
  std::vector<std::string> prunes;  // keys to delete after this batch

  std::mutex mu;
  std::condition_variable events_cv;  // the coordinator thread waits for events, `lost`, `stopping`
  std::condition_variable state_cv;   // waiters for `alone`, `failed`, `lost`: not woken by every event
  std::deque<StoreEvent> events;
  std::string lost;
  bool stopping = false;
  bool alone = false;
  bool job_closed = false;
  bool failed = false;
};

RendezvousCoordinator::RendezvousCoordinator(StoreEndpoint store, StoreClientOptions options, RendezvousConfig config,
                                             std::function<void(const std::string&)> log, std::optional<NodeRecord> reference,
                                             std::function<void(const std::string&)> on_failed,
                                             std::function<void(const std::string&)> on_progress)
    : impl_(std::make_unique<Impl>(std::move(store), std::move(options), std::move(config), std::move(log),
                                   std::move(reference), std::move(on_failed), std::move(on_progress))) {}

RendezvousCoordinator::~RendezvousCoordinator() = default;

bool RendezvousCoordinator::closed() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_closed;
}

bool RendezvousCoordinator::wait_until_alone(Millis bound) {
  std::unique_lock lock(impl_->mu);
  return impl_->state_cv.wait_for(lock, bound, [&] { return impl_->alone || impl_->failed || !impl_->lost.empty(); }) &&
         impl_->alone;
}

bool RendezvousCoordinator::wait_until_drained(Millis bound) {
  std::unique_lock lock(impl_->mu);
  if (!impl_->job_closed) return false;
  return impl_->state_cv.wait_for(lock, bound, [&] { return impl_->alone || impl_->failed || !impl_->lost.empty(); }) &&
         impl_->alone;
}

}  // namespace crun
