#include "rendezvous/rendezvous_coordinator.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace crun {

namespace {
using Clock = std::chrono::steady_clock;

std::string seconds(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d + std::chrono::milliseconds(999)).count()) + " s";
}
}  // namespace

struct RendezvousCoordinator::Impl {
  Impl(StoreEndpoint ep, StoreClientOptions opt, RendezvousConfig c, std::function<void(const std::string&)> l,
       std::optional<NodeRecord> ref, std::function<void(const std::string&)> failed_cb)
      : keys(c.run_id), cfg(std::move(c)), log(std::move(l)), on_failed(std::move(failed_cb)), store(ep, opt),
        reference(std::move(ref)) {
    watch = store.watch(
        keys.base, [this](const StoreEvent& e) { push(e); },
        [this](const std::string& why) {
          std::lock_guard lock(mu);
          lost = why;
          cv.notify_all();
        });
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
      cv.notify_all();
    }
    thread.join();
    watch.reset();
  }

  void push(const StoreEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
    cv.notify_all();
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
          cv.wait_until(lock, next_deadline(), [&] { return stopping || !events.empty() || !lost.empty(); });
          if (stopping) return;
          if (!lost.empty()) throw StoreConnectionError("its watch connection broke: " + lost);
          batch.swap(events);
        }
        for (auto& e : batch) handle(e);
        on_timers(Clock::now());
        flush_prunes();
        publish_drained();
      }
    } catch (const std::exception& e) {
      log(std::string("rendezvous coordinator stopped: ") + e.what());
      {
        std::lock_guard lock(mu);
        failed = true;
        cv.notify_all();
      }
      if (on_failed) on_failed(std::string("the rendezvous coordinator stopped: ") + e.what());
    }
  }

  Clock::time_point next_deadline() const {
    Clock::time_point t = Clock::now() + std::chrono::seconds(3600);
    if (!last_seen.empty()) t = std::min(t, next_scan);
    if (last_call_deadline) t = std::min(t, *last_call_deadline);
    if (progress_due) t = std::min(t, *progress_due);
    return t;
  }

  void handle(const StoreEvent& e) {
    std::string_view rest(e.key);
    rest.remove_prefix(keys.base.size());
    auto take = [&](std::string_view p) {
      if (!rest.starts_with(p)) return false;
      rest.remove_prefix(p.size());
      return true;
    };
    auto now = Clock::now();
    try {
      if (take("join/")) {
        if (e.kind == StoreEvent::Kind::kSet) on_join(NodeRecord::from_json(e.value), now);
      } else if (take("alive/")) {
        std::string node(rest);
        if (e.kind == StoreEvent::Kind::kSet) {
          alive.insert(node);
          last_seen[node] = now;
        } else if (alive.erase(node) != 0) {
          on_lost(node, "its agent exited or lost its store connection", now);
        }
      } else if (take("hb/")) {
        std::string node(rest);
        if (e.kind == StoreEvent::Kind::kSet && alive.count(node) != 0) last_seen[node] = now;
      } else if (take("report/")) {
        auto slash = rest.find('/');
        if (e.kind != StoreEvent::Kind::kSet || slash == std::string_view::npos) return;
        int r = std::stoi(std::string(rest.substr(0, slash)));
        std::string node(rest.substr(slash + 1));
        if (r <= round - 2) {
          prunes.push_back(e.key);  // a late report of a round already pruned
          return;
        }
        reporters[r].insert(node);
        on_report(r, node, RoundOutcome::from_json(e.value), now);
      }
    } catch (const std::invalid_argument& ex) {  // a peer's malformed record; store errors go up to run()
      log("rendezvous: ignored a malformed record at '" + e.key + "': " + ex.what());
    }
  }

  std::string describe(const std::string& node) const {
    auto it = known.find(node);
    return it == known.end() ? node : it->second.hostname + " (" + it->second.addr + ", " + node + ")";
  }

  void answer_error(const NodeRecord& rec, const std::string& error, bool closed) {
    RoundAnswer a;
    a.error = error;
    a.closed = closed;
    store.set(keys.answer(rec.node_id, rec.seq), a.to_json());
    answered[rec.node_id] = rec.seq;
  }

  void on_join(const NodeRecord& rec, Clock::time_point now) {
    auto seen = seen_seq.find(rec.node_id);
    if (seen != seen_seq.end() && seen->second >= rec.seq) return;  // already handled
    seen_seq[rec.node_id] = rec.seq;
    // A node joins again only after it read its previous answer.
    if (auto a = answered.find(rec.node_id); a != answered.end() && a->second < rec.seq) {
      prunes.push_back(keys.answer(rec.node_id, a->second));
      answered.erase(a);
    }
    known[rec.node_id] = rec;
    if (phase == Phase::kClosed) {
      answer_error(rec, "the rendezvous of run '" + cfg.run_id + "' is closed", true);
      return;
    }
    if (!reference) reference = rec;
    if (std::string diff = rec.mismatch(*reference); !diff.empty()) {
      std::string msg = "configuration of node " + describe(rec.node_id) + " differs from node " +
                        describe(reference->node_id) + ": " + diff;
      log("rendezvous: rejected " + msg);
      answer_error(rec, msg, false);
      return;
    }
    last_seen[rec.node_id] = now;
    waiting[rec.node_id] = rec;
    if (phase == Phase::kRunning) {
      if (in_round.count(rec.node_id) != 0) {
        begin_reform(false, "node " + describe(rec.node_id) + " rejoined", {}, {}, {});
      } else if (static_cast<int>(participants.size()) < cfg.max_nodes) {
        begin_reform(false, "node " + describe(rec.node_id) + " joined: scaling up", {}, {}, {});
      } else {
        log("rendezvous: node " + describe(rec.node_id) + " waits: the round is at its maximum of " +
            std::to_string(cfg.max_nodes) + " nodes");
      }
    }
    try_close(now);
  }

  void on_report(int r, const std::string& node, const RoundOutcome& outcome, Clock::time_point now) {
    if (phase != Phase::kRunning || r != round) return;
    if (in_round.count(node) == 0) return;
    if (outcome.succeeded) {
      succeeded.insert(node);
      if (succeeded.size() == participants.size()) {
        close_job(0, "all " + std::to_string(participants.size()) + " nodes succeeded", {}, {});
      }
      return;
    }
    std::string where = "worker failure on node " + describe(node) + " (exit code " + std::to_string(outcome.exit_code) + ")";
    if (restart_count >= cfg.max_restarts) {
      close_job(outcome.exit_code, where + "; no restarts left (max " + std::to_string(cfg.max_restarts) + ")", node,
                outcome.report);
      return;
    }
    ++restart_count;
    begin_reform(true, where + "; restart " + std::to_string(restart_count) + " of " + std::to_string(cfg.max_restarts),
                 node, outcome.report, {});
    try_close(now);
  }

  void on_lost(const std::string& node, const std::string& why, Clock::time_point now) {
    // Its records go; should it come back (a healed partition) it writes them again.
    if (auto a = answered.find(node); a != answered.end()) {
      prunes.push_back(keys.answer(node, a->second));
      answered.erase(a);
    }
    prunes.push_back(keys.join(node));
    prunes.push_back(keys.heartbeat(node));
    last_seen.erase(node);
    waiting.erase(node);
    expected.erase(node);
    bool participant = in_round.count(node) != 0;
    if (participant && phase != Phase::kClosed) log("rendezvous: lost node " + describe(node) + ": " + why);
    if (phase == Phase::kRunning && participant) {
      begin_reform(false, "node " + describe(node) + " lost: " + why, {}, {}, node);
    }
    try_close(now);
  }

  // Ends the running round: agents stop their workers and join again.
  void begin_reform(bool failure, const std::string& detail, const std::string& origin, const std::string& report,
                    const std::string& lost_node) {
    ControlEvent ev;
    ev.kind = ControlEvent::Kind::kStop;
    ev.round = round;
    ev.restart_count = restart_count;
    ev.failure = failure;
    ev.detail = detail;
    ev.origin_node = origin;
    ev.report = report;
    store.set(keys.stop(round), ev.to_json());
    log("rendezvous: round " + std::to_string(round) + " ends: " + detail);
    phase = Phase::kForming;
    expected = std::set<std::string>(participants.begin(), participants.end());
    if (!lost_node.empty()) expected.erase(lost_node);
    for (auto it = expected.begin(); it != expected.end();) {
      it = last_seen.count(*it) != 0 ? std::next(it) : expected.erase(it);
    }
    participants.clear();
    in_round.clear();
    succeeded.clear();
    last_call_deadline.reset();
  }

  void try_close(Clock::time_point now) {
    if (phase != Phase::kForming || waiting.empty()) return;
    int n = static_cast<int>(waiting.size());
    bool all_expected = !expected.empty() &&
                        std::all_of(expected.begin(), expected.end(), [&](const std::string& e) { return waiting.count(e) != 0; });
    if (n >= cfg.max_nodes || (n >= cfg.min_nodes && all_expected)) {
      close_round();
      return;
    }
    if (n >= cfg.min_nodes && !last_call_deadline) last_call_deadline = now + cfg.last_call_timeout;
    if (n < cfg.min_nodes) last_call_deadline.reset();
    schedule_progress(now);
  }

  void close_round() {
    std::vector<const NodeRecord*> order;
    for (auto& [id, rec] : waiting) order.push_back(&rec);
    auto key = [&](const NodeRecord* r) {
      auto prev = last_rank.find(r->node_id);
      return std::tuple(r->rank_hint >= 0 ? r->rank_hint : INT_MAX, prev != last_rank.end() ? prev->second : INT_MAX,
                        r->node_id);
    };
    std::sort(order.begin(), order.end(), [&](auto* a, auto* b) { return key(a) < key(b); });
    if (static_cast<int>(order.size()) > cfg.max_nodes) order.resize(cfg.max_nodes);
    ++round;
    int n = static_cast<int>(order.size());
    std::vector<std::string> answer_keys, answer_values;
    participants.clear();
    last_rank.clear();
    for (int i = 0; i < n; ++i) {
      RoundAnswer a;
      a.round = round;
      a.restart_count = restart_count;
      a.node_rank = i;
      a.nnodes = n;
      a.master_addr = order[0]->addr;
      a.master_port = order[0]->free_port;
      answer_keys.push_back(keys.answer(order[i]->node_id, order[i]->seq));
      answer_values.push_back(a.to_json());
      answered[order[i]->node_id] = order[i]->seq;
      participants.push_back(order[i]->node_id);
      last_rank[order[i]->node_id] = i;
    }
    store.multi_set(answer_keys, answer_values);
    for (auto& id : participants) waiting.erase(id);
    in_round = std::set<std::string>(participants.begin(), participants.end());
    phase = Phase::kRunning;
    expected.clear();
    succeeded.clear();
    last_call_deadline.reset();
    progress_due.reset();
    last_progress_line.clear();
    log("rendezvous: round " + std::to_string(round) + " formed with " + std::to_string(n) + " node(s), restart count " +
        std::to_string(restart_count));
    prune_round(round - 2);
  }

  // Round `r` ended before the round before the current one formed: every agent of it has
  // rejoined or is gone, and its stop event reached every watcher when it was written.
  void prune_round(int r) {
    if (r < 0) return;
    prunes.push_back(keys.stop(r));
    for (auto it = reporters.begin(); it != reporters.end() && it->first <= r; it = reporters.erase(it)) {
      for (const auto& node : it->second) prunes.push_back(keys.report(it->first, node));
    }
    for (auto& key : store.list_keys(keys.round_prefix(r), 1u << 20)) prunes.push_back(std::move(key));
  }

  // Deletes what no agent can still need, in one pipelined batch.
  void flush_prunes() {
    if (prunes.empty()) return;
    auto p = store.pipeline();
    for (const auto& key : prunes) p.remove(key);
    prunes.clear();
    p.flush();
  }

  void close_job(int exit_code, const std::string& detail, const std::string& origin, const std::string& report) {
    ControlEvent ev;
    ev.kind = ControlEvent::Kind::kClosed;
    ev.round = round;
    ev.restart_count = restart_count;
    ev.failure = exit_code != 0;
    ev.exit_code = exit_code;
    ev.detail = detail;
    ev.origin_node = origin;
    ev.report = report;
    // Closed before it is published: an agent that reads the close and asks closed() or
    // wait_until_drained() must never find the coordinator still open.
    phase = Phase::kClosed;
    {
      std::lock_guard lock(mu);
      job_closed = true;
    }
    store.set(keys.closed(), ev.to_json());
    log("rendezvous: closed: " + detail);
    for (auto& [id, rec] : waiting) answer_error(rec, "the rendezvous of run '" + cfg.run_id + "' is closed", true);
    waiting.clear();
    last_call_deadline.reset();
    progress_due.reset();
  }

  void schedule_progress(Clock::time_point now) {
    if (!progress_due) progress_due = std::max(now, last_progress + std::chrono::seconds(1));
  }

  void publish_progress(Clock::time_point now) {
    progress_due.reset();
    if (phase != Phase::kForming) return;
    std::string line = "round " + std::to_string(round + 1) + ": " + std::to_string(waiting.size()) + "/" +
                       std::to_string(cfg.min_nodes) + (cfg.max_nodes != cfg.min_nodes ? ".." + std::to_string(cfg.max_nodes) : "") +
                       " nodes";
    if (last_call_deadline) line += ", last call in " + seconds(*last_call_deadline - now);
    if (line == last_progress_line) return;
    last_progress_line = line;
    last_progress = now;
    store.set(keys.progress(), line);
  }

  void on_timers(Clock::time_point now) {
    if (now >= next_scan) {
      next_scan = now + std::max(std::chrono::milliseconds(50), cfg.heartbeat_timeout / 4);
      std::vector<std::string> stale;
      for (auto& [node, seen] : last_seen)
        if (now - seen > cfg.heartbeat_timeout) stale.push_back(node);
      for (auto& node : stale) {
        alive.erase(node);
        store.remove(keys.alive(node));  // ends its ephemeral key: a partitioned agent counts as gone
        on_lost(node, "no heartbeat for " + seconds(cfg.heartbeat_timeout), now);
      }
    }
    if (last_call_deadline && now >= *last_call_deadline) {
      last_call_deadline.reset();
      if (phase == Phase::kForming && static_cast<int>(waiting.size()) >= cfg.min_nodes) close_round();
    }
    if (progress_due && now >= *progress_due) publish_progress(now);
  }

  // Tells waiters whether any participant is still connected (drained = closed and alone).
  void publish_drained() {
    const bool now_alone = alive.empty();
    if (now_alone == alone) return;
    std::lock_guard lock(mu);
    alone = now_alone;
    cv.notify_all();
  }

  RendezvousKeys keys;
  RendezvousConfig cfg;
  std::function<void(const std::string&)> log;
  std::function<void(const std::string&)> on_failed;
  TcpStore store;
  std::unique_ptr<StoreWatch> watch;
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<StoreEvent> events;
  std::string lost;
  bool stopping = false;
  bool alone = false;
  bool job_closed = false;
  bool failed = false;

  enum class Phase { kForming, kRunning, kClosed };
  Phase phase = Phase::kForming;
  int round = -1;
  int restart_count = 0;
  std::map<std::string, NodeRecord> waiting;
  std::map<std::string, NodeRecord> known;
  std::map<std::string, int> seen_seq;
  std::vector<std::string> participants;
  std::set<std::string> expected;
  std::map<std::string, int> last_rank;
  std::map<std::string, Clock::time_point> last_seen;
  std::set<std::string> alive;
  std::optional<NodeRecord> reference;
  std::set<std::string> succeeded;
  std::set<std::string> in_round;  // participants, for O(log n) membership tests
  std::map<std::string, int> answered;               // node -> seq of its answer key in the store
  std::map<int, std::set<std::string>> reporters;    // round -> nodes whose report key exists
  std::vector<std::string> prunes;                   // keys to delete after this batch
  std::optional<Clock::time_point> last_call_deadline;
  std::optional<Clock::time_point> progress_due;
  Clock::time_point last_progress{};
  std::string last_progress_line;
  Clock::time_point next_scan{};
};

RendezvousCoordinator::RendezvousCoordinator(StoreEndpoint store, StoreClientOptions options, RendezvousConfig config,
                                             std::function<void(const std::string&)> log, std::optional<NodeRecord> reference,
                                             std::function<void(const std::string&)> on_failed)
    : impl_(std::make_unique<Impl>(std::move(store), std::move(options), std::move(config), std::move(log),
                                   std::move(reference), std::move(on_failed))) {}

RendezvousCoordinator::~RendezvousCoordinator() = default;

bool RendezvousCoordinator::closed() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_closed;
}

bool RendezvousCoordinator::wait_until_alone(Millis bound) {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, bound, [&] { return impl_->alone || impl_->failed || !impl_->lost.empty(); }) &&
         impl_->alone;
}

bool RendezvousCoordinator::wait_until_drained(Millis bound) {
  std::unique_lock lock(impl_->mu);
  if (!impl_->job_closed) return false;
  return impl_->cv.wait_for(lock, bound, [&] { return impl_->alone || impl_->failed || !impl_->lost.empty(); }) &&
         impl_->alone;
}

}  // namespace crun
