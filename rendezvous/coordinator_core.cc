#include "rendezvous/coordinator_core.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "base/exit_codes.h"
#include "base/utc_text.h"
#include "rendezvous/node_order.h"

namespace crun {

namespace {
std::string seconds(CoordinatorClock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d + std::chrono::milliseconds(999)).count()) + " s";
}

std::string tenths(CoordinatorClock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}
}  // namespace

namespace fx = coordinator_effect;

CoordinatorCore::CoordinatorCore(RendezvousConfig config, std::optional<NodeRecord> reference)
    : keys_(config.run_id), cfg_(std::move(config)), progress_(cfg_.no_progress_limit), reference_(std::move(reference)) {
  if (reference_) host_node_ = reference_->node_id;
}

CoordinatorEffects CoordinatorCore::take() { return std::exchange(out_, {}); }

bool CoordinatorCore::others_alive() const {
  return std::any_of(alive_.begin(), alive_.end(), [&](const std::string& n) { return n != host_node_; });
}

CoordinatorClock::duration CoordinatorCore::loss_limit() const { return cfg_.heartbeat_timeout + cfg_.keep_alive_interval; }

// Any event or on_timers() handled later than on_timers() was due by more than kStallSlack: the
// coordinator was stalled (its process stopped, or its thread held up) at least that long, and
// heartbeats and joins sent meanwhile may still be on their way to it. That time counts towards
// the silence of no node; a heartbeat handled since (in the batch that ended the stall) is fresh.
// The first call after the stall notices it, whichever it is: the events the stall held up (a
// peer's connection that closed meanwhile) may come before the timers. A stall of
// heartbeat_timeout + keep_alive_interval or more outlasted every agent's wait for a heartbeat's reply (heartbeat_timeout, one sent every
// keep_alive_interval): each has declared the store lost and exits with kExitStoreLost, so the
// job closes with that code now rather than waiting join_timeout for nodes that will not come.
void CoordinatorCore::catch_up(TimePoint now) {
  // due_ stays until on_timers() sets the next one: a stall that begins right after an event,
  // before the timers ran, is noticed as well. Once noticed, it is counted no more.
  if (!due_ || now - *due_ <= kStallSlack) return;
  const auto due = std::exchange(due_, std::nullopt);
  const auto held = now - *due;
  for (auto& [node, seen] : last_seen_) {
    if (seen < *due) seen += held;
  }
  if (phase_ == Phase::kClosed || held < loss_limit() || !others_alive()) return;
  close_job(kExitStoreLost,
            "the store's host was stalled for " + tenths(held) + ", past the heartbeat_timeout of " +
                tenths(cfg_.heartbeat_timeout) + " that every agent waits for a heartbeat's reply: each has given up "
                "on the store",
            {}, {});
}

std::optional<CoordinatorCore::TimePoint> CoordinatorCore::next_deadline() const {
  std::optional<TimePoint> t;
  auto earliest = [&](TimePoint p) { t = t ? std::min(*t, p) : p; };
  if (!last_seen_.empty()) earliest(next_scan_);
  if (last_call_deadline_) earliest(*last_call_deadline_);
  if (progress_due_) earliest(*progress_due_);
  return t;
}

std::string CoordinatorCore::describe(const std::string& node) const {
  const NodeRecord* r = nullptr;
  if (auto it = known_.find(node); it != known_.end()) r = &it->second;
  else if (reference_ && reference_->node_id == node) r = &*reference_;  // the host's, before it joined
  if (r == nullptr) return node;
  return r->hostname + " (" + (r->addr.empty() ? "" : r->addr + ", ") + node + ")";
}

void CoordinatorCore::answer_error(const NodeRecord& rec, const std::string& error, bool closed) {
  RoundAnswer a;
  a.error = error;
  a.closed = closed;
  out_.push_back(fx::Answer{{{rec.node_id, rec.seq, a}}});
  answered_[rec.node_id] = rec.seq;
}

CoordinatorEffects CoordinatorCore::on_join(const NodeRecord& rec, TimePoint now) {
  catch_up(now);
  auto seen = seen_seq_.find(rec.node_id);
  if (seen != seen_seq_.end() && seen->second >= rec.seq) return take();  // already handled
  seen_seq_[rec.node_id] = rec.seq;
  // A node joins again only after it read its previous answer.
  if (auto a = answered_.find(rec.node_id); a != answered_.end() && a->second < rec.seq) {
    out_.push_back(fx::Prune{keys_.answer(rec.node_id, a->second)});
    answered_.erase(a);
  }
  known_[rec.node_id] = rec;
  if (phase_ == Phase::kClosed) {
    answer_error(rec, "the rendezvous of run '" + cfg_.run_id + "' is closed", true);
    return take();
  }
  if (!reference_) reference_ = rec;
  if (std::string diff = rec.mismatch(*reference_); !diff.empty()) {
    std::string msg = "configuration of node " + describe(rec.node_id) + " differs from node " +
                      describe(reference_->node_id) + ": " + diff;
    out_.push_back(fx::Log{"rendezvous: rejected " + msg});
    answer_error(rec, msg, false);
    return take();
  }
  if (auto ex = exclusions_.find(rec.node_id); ex != exclusions_.end()) {
    if (ex->second.until > now) {
      RoundAnswer a;
      a.error = "node " + describe(rec.node_id) + " is excluded until " + utc_text(wall_ms(ex->second.until) * 1000, 0) + " (" +
                seconds(ex->second.until - now) + " more): " + ex->second.reason;
      a.excluded_for_ms = std::max<std::int64_t>(
          1, std::chrono::duration_cast<std::chrono::milliseconds>(ex->second.until - now).count());
      a.excluded_reason = ex->second.reason;
      out_.push_back(fx::Answer{{{rec.node_id, rec.seq, a}}});
      answered_[rec.node_id] = rec.seq;
      return take();
    }
    if (!ex->second.reason.empty()) {
      out_.push_back(fx::Log{"rendezvous: node " + describe(rec.node_id) + " joins again: its exclusion ended"});
      ex->second.reason.clear();  // said once; its count stays (the next cooldown doubles)
    }
  }
  last_seen_[rec.node_id] = now;
  waiting_[rec.node_id] = rec;
  if (phase_ == Phase::kRunning) {
    if (in_round_.count(rec.node_id) != 0) {
      begin_reform(false, "node " + describe(rec.node_id) + " rejoined", {}, {}, {});
    } else if (static_cast<int>(participants_.size()) < cfg_.max_nodes) {
      begin_reform(false, "node " + describe(rec.node_id) + " joined: scaling up", {}, {}, {});
    } else {
      out_.push_back(fx::Log{"rendezvous: node " + describe(rec.node_id) + " waits: the round is at its maximum of " +
                             std::to_string(cfg_.max_nodes) + " nodes"});
    }
  }
  try_close(now);
  return take();
}

CoordinatorEffects CoordinatorCore::on_alive(const std::string& node, TimePoint now) {
  catch_up(now);
  alive_.insert(node);
  last_seen_[node] = now;
  return take();
}

CoordinatorEffects CoordinatorCore::on_alive_gone(const std::string& node, TimePoint now) {
  catch_up(now);
  if (alive_.erase(node) != 0) lost(node, "its agent exited or lost its store connection", now);
  return take();
}

CoordinatorEffects CoordinatorCore::on_heartbeat(const std::string& node, TimePoint now) {
  catch_up(now);
  if (alive_.count(node) != 0) last_seen_[node] = now;
  return take();
}

CoordinatorEffects CoordinatorCore::on_report(int r, const std::string& node, const std::optional<RoundOutcome>& outcome,
                                              TimePoint now) {
  catch_up(now);
  if (r <= round_ - 2) {
    out_.push_back(fx::Prune{keys_.report(r, node)});  // a late report of a round already pruned
    return take();
  }
  reporters_[r].insert(node);
  if (!outcome || phase_ != Phase::kRunning || r != round_) return take();
  if (in_round_.count(node) == 0) return take();
  if (!outcome->stop_request.empty()) {
    close_job(outcome->exit_code,
              "node " + describe(node) + " asked to stop the job (exit code " + std::to_string(outcome->exit_code) +
                  "): " + outcome->stop_request,
              node, outcome->report);
    return take();
  }
  if (outcome->succeeded && outcome->exclude_request.empty()) {
    succeeded_.insert(node);
    if (succeeded_.size() == participants_.size()) {
      close_job(0, "all " + std::to_string(participants_.size()) + " nodes succeeded", {}, {});
    }
    return take();
  }
  const std::string where =
      "worker failure on node " + describe(node) + " (exit code " + std::to_string(outcome->exit_code) + "); ";
  const RestartDecision decision =
      decide_after_failure(restart_count_, cfg_.max_restarts, outcome->exit_code, outcome->highest_step, progress_);
  if (!decision.restart()) {
    close_job(decision.exit_code, where + decision.reason, node, outcome->report);
    return take();
  }
  // The root cause: count it, and exclude its node when it is due and the job can go on without it.
  const bool asked = !outcome->exclude_request.empty();
  const int count = ++root_causes_[node];
  std::string excluded;
  if (asked || (cfg_.exclude_after > 0 && count >= cfg_.exclude_after)) {
    const std::string why = asked ? "a worker asked to exclude it: " + outcome->exclude_request
                                  : "the root cause " + std::to_string(count) + " times";
    if (replaceable(node)) {
      excluded = exclude(node, why, now);
    } else if (asked) {
      close_job(kExitNodeUnhealthy,
                "node " + describe(node) + " asked to be excluded (" + outcome->exclude_request +
                    "); no other node can replace it",
                node, outcome->report);
      return take();
    } else {
      out_.push_back(fx::Log{"rendezvous: node " + describe(node) + " was the root cause " + std::to_string(count) +
                             " times; kept: no other node can replace it"});
    }
  }
  ++restart_count_;
  begin_reform(true, where + decision.reason + (excluded.empty() ? "" : "; node " + describe(node) + " " + excluded), node,
               outcome->report, excluded.empty() ? std::string() : node, excluded);
  try_close(now);
  return take();
}

// The next round can reach min_nodes without `node`: the round's other live nodes and the nodes
// waiting (spares; an excluded node never waits).
bool CoordinatorCore::replaceable(const std::string& node) const {
  int others = 0;
  for (const auto& p : participants_) others += p != node && last_seen_.count(p) != 0 ? 1 : 0;
  for (const auto& [id, rec] : waiting_) others += id != node && in_round_.count(id) == 0 ? 1 : 0;
  return others >= cfg_.min_nodes;
}

// Keeps `node` out for its cooldown; returns the note for the round's end.
std::string CoordinatorCore::exclude(const std::string& node, const std::string& why, TimePoint now) {
  Exclusion& e = exclusions_[node];
  ++e.times;
  const auto cooldown = cfg_.exclude_cooldown * (std::int64_t{1} << std::min(e.times - 1, 20));
  e.until = now + cooldown;
  e.reason = why;
  root_causes_.erase(node);
  ++exclusions_total_;
  const std::string note = "excluded for " + seconds(cooldown) + " (exclusion " + std::to_string(e.times) + "): " + why;
  out_.push_back(fx::Log{"rendezvous: node " + describe(node) + " " + note});
  return note;
}

std::int64_t CoordinatorCore::wall_ms(TimePoint t) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() + wall_offset_.count();
}

std::vector<ExcludedNode> CoordinatorCore::excluded_now(TimePoint now) const {
  std::vector<ExcludedNode> out;
  for (const auto& [id, e] : exclusions_) {
    if (e.until <= now) continue;
    ExcludedNode n;
    n.node_id = id;
    if (auto k = known_.find(id); k != known_.end()) {
      n.hostname = k->second.hostname;
      n.addr = k->second.addr;
    }
    n.reason = e.reason;
    n.times = e.times;
    n.until_unix_ms = wall_ms(e.until);
    out.push_back(std::move(n));
  }
  return out;
}

void CoordinatorCore::lost(const std::string& node, const std::string& why, TimePoint now) {
  // Its records go; should it come back (a healed partition) it writes them again.
  if (auto a = answered_.find(node); a != answered_.end()) {
    out_.push_back(fx::Prune{keys_.answer(node, a->second)});
    answered_.erase(a);
  }
  out_.push_back(fx::Prune{keys_.join(node)});
  out_.push_back(fx::Prune{keys_.heartbeat(node)});
  last_seen_.erase(node);
  waiting_.erase(node);
  expected_.erase(node);
  bool participant = in_round_.count(node) != 0;
  if (participant && phase_ != Phase::kClosed) out_.push_back(fx::Log{"rendezvous: lost node " + describe(node) + ": " + why});
  if (phase_ == Phase::kRunning && participant) {
    begin_reform(false, "node " + describe(node) + " lost: " + why, {}, {}, node);
  }
  try_close(now);
}

// Ends the running round: agents stop their workers and join again.
void CoordinatorCore::begin_reform(bool failure, const std::string& detail, const std::string& origin,
                                   const std::string& report, const std::string& lost_node, const std::string& excluded) {
  ControlEvent ev;
  ev.kind = ControlEvent::Kind::kStop;
  ev.round = round_;
  ev.restart_count = restart_count_;
  ev.failure = failure;
  ev.detail = detail;
  ev.origin_node = origin;
  ev.report = report;
  ev.excluded = excluded;
  out_.push_back(fx::Control{std::move(ev)});
  out_.push_back(fx::Log{"rendezvous: round " + std::to_string(round_) + " ends: " + detail});
  phase_ = Phase::kForming;
  expected_ = std::set<std::string>(participants_.begin(), participants_.end());
  if (!lost_node.empty()) expected_.erase(lost_node);
  for (auto it = expected_.begin(); it != expected_.end();) {
    it = last_seen_.count(*it) != 0 ? std::next(it) : expected_.erase(it);
  }
  participants_.clear();
  in_round_.clear();
  succeeded_.clear();
  last_call_deadline_.reset();
}

void CoordinatorCore::try_close(TimePoint now) {
  if (phase_ != Phase::kForming || waiting_.empty()) return;
  int n = static_cast<int>(waiting_.size());
  bool all_expected = !expected_.empty() && std::all_of(expected_.begin(), expected_.end(),
                                                        [&](const std::string& e) { return waiting_.count(e) != 0; });
  // Spares waiting may fill max_nodes before the survivors are back: the survivors come first
  // (they keep their ranks), so max_nodes forms the round at once only when none is missing.
  if ((n >= cfg_.max_nodes && (expected_.empty() || all_expected)) || (n >= cfg_.min_nodes && all_expected)) {
    close_round(now);
    return;
  }
  if (n >= cfg_.min_nodes && !last_call_deadline_) last_call_deadline_ = now + cfg_.last_call_timeout;
  if (n < cfg_.min_nodes) last_call_deadline_.reset();
  schedule_progress(now);
}

void CoordinatorCore::close_round(TimePoint now) {
  std::vector<const NodeRecord*> waiting;
  for (auto& [id, rec] : waiting_) waiting.push_back(&rec);
  const std::vector<const NodeRecord*> order = order_nodes(std::move(waiting), last_rank_, cfg_.max_nodes);
  ++round_;
  int n = static_cast<int>(order.size());
  fx::Answer answers;
  participants_.clear();
  last_rank_.clear();
  const std::vector<std::string> endpoints = state_endpoints(order);
  const std::vector<ExcludedNode> excluded = excluded_now(now);
  for (int i = 0; i < n; ++i) {
    RoundAnswer a;
    a.round = round_;
    a.restart_count = restart_count_;
    a.node_rank = i;
    a.nnodes = n;
    a.master_addr = order[0]->addr;
    a.master_port = order[0]->free_port;
    a.state_endpoints = endpoints;
    a.excluded = excluded;
    a.exclusions_total = exclusions_total_;
    answers.entries.push_back({order[i]->node_id, order[i]->seq, std::move(a)});
    answered_[order[i]->node_id] = order[i]->seq;
    participants_.push_back(order[i]->node_id);
    last_rank_[order[i]->node_id] = i;
  }
  out_.push_back(fx::ClearWorkerKeys{});
  out_.push_back(std::move(answers));
  for (auto& id : participants_) waiting_.erase(id);
  in_round_ = std::set<std::string>(participants_.begin(), participants_.end());
  phase_ = Phase::kRunning;
  expected_.clear();
  succeeded_.clear();
  last_call_deadline_.reset();
  progress_due_.reset();
  last_progress_line_.clear();
  out_.push_back(fx::Log{"rendezvous: round " + std::to_string(round_) + " formed with " + std::to_string(n) +
                         " node(s), restart count " + std::to_string(restart_count_)});
  prune_round(round_ - 2);
}

// Round `r` ended before the round before the current one formed: every agent of it has
// rejoined or is gone, and its stop event reached every watcher when it was written.
void CoordinatorCore::prune_round(int r) {
  if (r < 0) return;
  out_.push_back(fx::Prune{keys_.stop(r)});
  for (auto it = reporters_.begin(); it != reporters_.end() && it->first <= r; it = reporters_.erase(it)) {
    for (const auto& node : it->second) out_.push_back(fx::Prune{keys_.report(it->first, node)});
  }
  out_.push_back(fx::PruneRound{r});
}

void CoordinatorCore::close_job(int exit_code, const std::string& detail, const std::string& origin,
                                const std::string& report) {
  ControlEvent ev;
  ev.kind = ControlEvent::Kind::kClosed;
  ev.round = round_;
  ev.restart_count = restart_count_;
  ev.failure = exit_code != 0;
  ev.exit_code = exit_code;
  ev.detail = detail;
  ev.origin_node = origin;
  ev.report = report;
  // Closed before it is published: an agent that reads the close and asks the coordinator
  // whether it closed must never find it still open.
  phase_ = Phase::kClosed;
  out_.push_back(fx::Closed{});
  out_.push_back(fx::Control{std::move(ev)});
  out_.push_back(fx::Log{"rendezvous: closed: " + detail});
  for (auto& [id, rec] : waiting_) answer_error(rec, "the rendezvous of run '" + cfg_.run_id + "' is closed", true);
  waiting_.clear();
  last_call_deadline_.reset();
  progress_due_.reset();
}

void CoordinatorCore::schedule_progress(TimePoint now) {
  if (!progress_due_) progress_due_ = std::max(now, last_progress_ + std::chrono::seconds(1));
}

void CoordinatorCore::publish_progress(TimePoint now) {
  progress_due_.reset();
  if (phase_ != Phase::kForming) return;
  std::string line = "round " + std::to_string(round_ + 1) + ": " + std::to_string(waiting_.size()) + "/" +
                     std::to_string(cfg_.min_nodes) +
                     (cfg_.max_nodes != cfg_.min_nodes ? ".." + std::to_string(cfg_.max_nodes) : "") + " nodes";
  if (last_call_deadline_) line += ", last call in " + seconds(*last_call_deadline_ - now);
  if (line == last_progress_line_) return;
  last_progress_line_ = line;
  last_progress_ = now;
  out_.push_back(fx::Progress{std::move(line)});
}

CoordinatorEffects CoordinatorCore::on_timers(TimePoint now) {
  catch_up(now);
  if (now >= next_scan_) {
    next_scan_ = now + std::max<CoordinatorClock::duration>(std::chrono::milliseconds(50), cfg_.heartbeat_timeout / 4);
    std::vector<std::string> stale;
    for (auto& [node, seen] : last_seen_)
      if (now - seen > loss_limit()) stale.push_back(node);
    for (auto& node : stale) {
      alive_.erase(node);
      out_.push_back(fx::EndAlive{node});  // a partitioned agent counts as gone
      lost(node, "no heartbeat for " + seconds(loss_limit()), now);
    }
  }
  if (last_call_deadline_ && now >= *last_call_deadline_) {
    last_call_deadline_.reset();
    if (phase_ == Phase::kForming && static_cast<int>(waiting_.size()) >= cfg_.min_nodes) close_round(now);
  }
  if (progress_due_ && now >= *progress_due_) publish_progress(now);
  if (auto next = next_deadline()) due_ = std::max(now, *next);
  return take();
}

}  // namespace crun
