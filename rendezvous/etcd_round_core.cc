#include "rendezvous/etcd_round_core.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "base/exit_codes.h"
#include "base/utc_text.h"
#include "base/restart_policy.h"
#include "rendezvous/node_order.h"

namespace crun {

namespace {

bool in(const std::vector<std::string>& nodes, const std::string& node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

std::string seconds(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::to_string((ms + 999) / 1000) + " s";
}

}  // namespace

EtcdRoundCore::EtcdRoundCore(RendezvousConfig config, EtcdKeys keys, NodeRecord self)
    : cfg_(std::move(config)), keys_(std::move(keys)), self_(std::move(self)) {}

void EtcdRoundCore::load(const std::optional<std::pair<std::string, std::int64_t>>& round,
                         const std::vector<std::string>& alive, std::int64_t revision) {
  if (round) on_round(round->first, round->second);
  else on_round_gone(revision);
  // The record's nodes whose alive key was already gone when we looked are gone for good.
  alive_ = std::set<std::string>(alive.begin(), alive.end());
  if (state_) {
    const std::set<std::string> now(alive.begin(), alive.end());
    for (const auto* list : {&state_->participants, &state_->expected}) {
      for (const auto& n : *list) {
        if (!now.count(n)) gone_.insert(n);
      }
    }
  }
  loaded_ = true;
}

void EtcdRoundCore::on_round(const std::string& value, std::int64_t revision) {
  if (revision <= state_seen_) return;
  state_seen_ = revision;
  state_revision_ = revision;
  try {
    state_ = EtcdRoundRecord::from_json(value);
    state_error_.clear();
  } catch (const std::invalid_argument& e) {
    state_.reset();
    state_error_ = e.what();
  }
}

void EtcdRoundCore::on_round_gone(std::int64_t revision) {
  if (revision <= state_seen_) return;
  state_seen_ = revision;
  state_revision_ = 0;
  state_.reset();
  state_error_.clear();
}

void EtcdRoundCore::on_node_gone(const std::string& node) {
  alive_.erase(node);
  if (gone_.insert(node).second && joins_) reread_ = true;
}

void EtcdRoundCore::on_alive_list(const std::vector<std::string>& nodes) {
  alive_.clear();
  for (const auto& n : nodes) {
    if (live(n)) alive_.insert(n);
  }
  alive_read_in_flight_ = false;
  alive_fresh_ = true;
  need_alive_ = false;
}

std::int64_t EtcdRoundCore::wall_ms(TimePoint now) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() + wall_offset_.count();
}

const ExcludedNode* EtcdRoundCore::exclusion_of(const std::string& node, TimePoint now) const {
  if (!state_) return nullptr;
  for (const auto& e : state_->excluded) {
    if (e.node_id == node && e.until_unix_ms > wall_ms(now)) return &e;
  }
  return nullptr;
}

std::vector<ExcludedNode> EtcdRoundCore::excluded_now(TimePoint now) const {
  std::vector<ExcludedNode> out;
  if (!state_) return out;
  for (const auto& e : state_->excluded) {
    if (e.until_unix_ms > wall_ms(now)) out.push_back(e);
  }
  return out;
}

// The next round reaches min_nodes without this agent: the round's other live nodes, and the
// live nodes outside it that are not excluded (spares waiting for a round with room).
bool EtcdRoundCore::replaceable(const EtcdRoundRecord& s, TimePoint now) const {
  int others = 0;
  for (const auto& p : s.participants) others += p != self_.node_id && live(p) ? 1 : 0;
  for (const auto& n : alive_) {
    others += n != self_.node_id && live(n) && !in(s.participants, n) && exclusion_of(n, now) == nullptr ? 1 : 0;
  }
  return others >= cfg_.min_nodes;
}

void EtcdRoundCore::on_join_count(int round, std::int64_t count, TimePoint now) {
  if (round != join_round_) return;
  join_count_ = count;
  if (count >= cfg_.min_nodes && !last_call_) last_call_ = now + cfg_.last_call_timeout;
}

void EtcdRoundCore::on_joins(int round, const std::vector<EtcdJoinRecord>& joins) {
  read_in_flight_ = false;
  if (round != join_round_) return;
  joins_ = joins;
  reread_ = false;
}

void EtcdRoundCore::on_report_count(int round, std::int64_t count) {
  if (state_ && state_->phase == EtcdRoundRecord::Phase::kRunning && state_->round == round &&
      count >= static_cast<std::int64_t>(state_->participants.size())) {
    report_complete_ = round;
  }
}

void EtcdRoundCore::request_round(TimePoint now, std::uint16_t free_port) {
  waiting_ = true;
  excluded_wait_ = false;
  join_deadline_ = now + cfg_.join_timeout;
  join_round_ = -1;  // join again, with this request's port
  self_.free_port = free_port;
  ++self_.seq;
}

void EtcdRoundCore::publish_failure(int round, const RoundOutcome& outcome) {
  RoundOutcome o = outcome;
  o.succeeded = false;
  failure_ = std::pair{round, o};
}

void EtcdRoundCore::publish_success(int round) { success_ = round; }

int EtcdRoundCore::live_expected() const {
  int n = 0;
  for (const auto& e : state_->expected) n += live(e) ? 1 : 0;
  return n;
}

EtcdRoundActions EtcdRoundCore::decide(TimePoint now) {
  EtcdRoundActions out;
  if (!loaded_) return out;
  if (success_) {
    EtcdReportRecord r;
    r.round = *success_;
    r.outcome.succeeded = true;
    out.report = EtcdRoundPut{*success_, keys_.report(*success_, self_.node_id), r.to_json(), keys_.report_prefix(*success_)};
    success_.reset();
  }
  deliver_controls(out);
  if (waiting_) answer_or_join(now, out);
  if (!write_in_flight_) {
    out.write = next_write(now);
    write_in_flight_ = out.write.has_value();
  }
  if (!kept_line_.empty()) out.progress.push_back(std::exchange(kept_line_, {}));
  if (need_alive_ && !alive_read_in_flight_) {
    out.read_alive = true;
    alive_read_in_flight_ = true;
  }
  if (!out.write) maybe_read_joins(now, out);
  if (waiting_) {
    out.deadline = join_deadline_;
    if (last_call_ && join_round_ >= 0) out.deadline = std::min(*out.deadline, *last_call_);
  }
  return out;
}

void EtcdRoundCore::deliver_controls(EtcdRoundActions& out) {
  if (excluded_wait_ && state_ && state_->phase == EtcdRoundRecord::Phase::kClosed && !waiting_) {
    ControlEvent e = state_->cause.value_or(ControlEvent{});
    e.kind = ControlEvent::Kind::kClosed;
    out.controls.push_back(e);
    excluded_wait_ = false;
    return;
  }
  if (running_round_ < 0 || !state_) return;
  const EtcdRoundRecord& s = *state_;
  if (s.phase == EtcdRoundRecord::Phase::kClosed) {
    ControlEvent e = s.cause.value_or(ControlEvent{});
    e.kind = ControlEvent::Kind::kClosed;
    e.round = running_round_;
    out.controls.push_back(e);
    running_round_ = -1;
    return;
  }
  if (s.round <= running_round_) return;
  ControlEvent e = s.cause.value_or(ControlEvent{});
  e.kind = ControlEvent::Kind::kStop;
  e.round = running_round_;
  e.restart_count = s.restart_count;
  out.controls.push_back(e);
  running_round_ = -1;
}

void EtcdRoundCore::answer_error(const std::string& error, int exit_code, EtcdRoundActions& out) {
  RoundResult r;
  r.error = error;
  r.exit_code = exit_code;
  out.answers.push_back(r);
  waiting_ = false;
}

void EtcdRoundCore::answer_or_join(TimePoint now, EtcdRoundActions& out) {
  if (!state_error_.empty()) {
    answer_error("etcd holds a malformed round record at " + keys_.round() + ": " + state_error_, kExitRendezvousRejected, out);
    return;
  }
  if (now >= join_deadline_) {
    answer_error("no round formed within the join timeout (" + seconds(cfg_.join_timeout) + ")", kExitRendezvousTimeout, out);
    return;
  }
  if (!state_) return;  // next_write creates the record
  const EtcdRoundRecord& s = *state_;
  if (s.phase == EtcdRoundRecord::Phase::kClosed) {
    answer_error("the rendezvous of run '" + cfg_.run_id + "' is closed" + (s.cause ? ": " + s.cause->detail : std::string()),
                 kExitRendezvousClosed, out);
    return;
  }
  NodeRecord reference;
  try {
    reference = NodeRecord::from_json(s.reference);
  } catch (const std::invalid_argument& e) {
    answer_error(std::string("etcd holds a malformed reference node: ") + e.what(), kExitRendezvousRejected, out);
    return;
  }
  if (reference.node_id != self_.node_id) {
    const std::string diff = self_.mismatch(reference);
    if (!diff.empty()) {
      answer_error("this node's configuration differs from node " + reference.node_id + "'s: " + diff,
                   kExitRendezvousRejected, out);
      return;
    }
  }
  if (const ExcludedNode* e = exclusion_of(self_.node_id, now)) {
    RoundResult r;
    const std::int64_t left = e->until_unix_ms - wall_ms(now);
    r.error = "node " + self_.hostname + " (" + (self_.addr.empty() ? "" : self_.addr + ", ") + self_.node_id +
              ") is excluded until " + utc_text(e->until_unix_ms * 1000, 0) + " (" + std::to_string((left + 999) / 1000) +
              " s more): " + e->reason;
    r.exit_code = kExitNodeUnhealthy;
    r.excluded_for = std::chrono::milliseconds(left);
    r.excluded_reason = e->reason;
    out.answers.push_back(r);
    waiting_ = false;
    excluded_wait_ = true;
    return;
  }
  if (s.phase == EtcdRoundRecord::Phase::kForming) {
    if (join_round_ != s.round) {
      EtcdJoinRecord j;
      j.round = s.round;
      j.node = self_;
      out.join = EtcdRoundPut{s.round, keys_.join(s.round, self_.node_id), j.to_json(), keys_.join_prefix(s.round)};
      join_round_ = s.round;
      join_count_ = -1;
      last_call_.reset();
      joins_.reset();
      read_after_last_call_ = false;
      reread_ = false;
    } else if (join_count_ == 1 && cfg_.min_nodes > 1) {
      progress(now, "round " + std::to_string(s.round) + ": waiting for " + std::to_string(cfg_.min_nodes) + " of up to " +
                        std::to_string(cfg_.max_nodes) + " nodes", out);
    } else if (join_count_ == cfg_.min_nodes && cfg_.min_nodes < cfg_.max_nodes && last_call_) {
      progress(now, "round " + std::to_string(s.round) + ": " + std::to_string(cfg_.min_nodes) + "/" +
                        std::to_string(cfg_.max_nodes) + " nodes, last call in " + seconds(*last_call_ - now), out);
    }
    return;
  }
  // Running: ours when this agent joined it and is one of its nodes.
  const auto me = std::find(s.participants.begin(), s.participants.end(), self_.node_id);
  if (me == s.participants.end() || join_round_ != s.round) {
    if (static_cast<int>(s.participants.size()) >= cfg_.max_nodes) {
      progress(now, "round " + std::to_string(s.round) + " is full (" + std::to_string(cfg_.max_nodes) +
                        " nodes); waiting for the next one", out);
    }
    return;
  }
  RoundResult r;
  r.rendezvous_round = s.round;
  RoundInfo& info = r.info;
  info.restart_count = s.restart_count;
  info.group_rank = static_cast<int>(me - s.participants.begin());
  info.group_world_size = static_cast<int>(s.participants.size());
  info.rank_offset = info.group_rank * self_.nproc;
  info.world_size = info.group_world_size * self_.nproc;
  info.master_addr = s.master_addr;
  info.master_port = s.master_port;
  info.state_endpoints = s.state_endpoints;
  r.excluded = excluded_now(now);
  r.exclusions_total = s.exclusions_total;
  out.answers.push_back(r);
  waiting_ = false;
  running_round_ = s.round;
  last_progress_.clear();
}

std::optional<EtcdRoundWrite> EtcdRoundCore::next_write(TimePoint now) {
  if (!state_error_.empty()) return std::nullopt;
  if (!state_) {
    if (!waiting_) return std::nullopt;
    EtcdRoundWrite w;
    w.next.reference = self_.to_json();
    w.if_revision = 0;
    return w;
  }
  const EtcdRoundRecord& s = *state_;
  if (s.phase == EtcdRoundRecord::Phase::kClosed || !live(self_.node_id)) return std::nullopt;
  if (failure_ && (s.phase != EtcdRoundRecord::Phase::kRunning || s.round != failure_->first)) failure_.reset();
  if (s.phase == EtcdRoundRecord::Phase::kForming) return freeze(now);

  // Running.
  std::vector<std::string> gone, rest;
  for (const auto& p : s.participants) (live(p) ? rest : gone).push_back(p);
  if (!gone.empty()) {
    ControlEvent c;
    c.detail = "node " + gone.front() + (gone.size() > 1 ? " and " + std::to_string(gone.size() - 1) + " more" : "") +
               " lost: its agent left or its etcd lease expired";
    return reform(s, rest, c);
  }
  if (failure_ && in(s.participants, self_.node_id)) {
    // An exclusion may be due: who could replace this node is read first (rare: no watch).
    const RoundOutcome& o = failure_->second;
    const auto counted = s.root_causes.find(self_.node_id);
    const int count = (counted == s.root_causes.end() ? 0 : counted->second) + 1;
    const bool due = o.stop_request.empty() &&
                     (!o.exclude_request.empty() || (cfg_.exclude_after > 0 && count >= cfg_.exclude_after));
    if (due && !alive_fresh_) {
      need_alive_ = true;
      return std::nullopt;
    }
    auto w = fail(o, now);
    failure_.reset();
    alive_fresh_ = false;
    return w;
  }
  if (report_complete_ == s.round) {
    return close(s, kExitSuccess, "all " + std::to_string(s.participants.size()) + " nodes succeeded", {}, {});
  }
  if (waiting_ && !in(s.participants, self_.node_id) && static_cast<int>(s.participants.size()) < cfg_.max_nodes) {
    ControlEvent c;
    c.detail = "node " + self_.node_id + " joined: scaling up";
    // The joiner is expected too: else the old nodes, all back, would form the round without it.
    std::vector<std::string> expected = s.participants;
    expected.push_back(self_.node_id);
    return reform(s, expected, c);
  }
  return std::nullopt;
}

void EtcdRoundCore::maybe_read_joins(TimePoint now, EtcdRoundActions& out) {
  if (!state_ || state_->phase != EtcdRoundRecord::Phase::kForming || !waiting_ || join_round_ != state_->round ||
      join_count_ < 0 || read_in_flight_ || write_in_flight_) {
    return;
  }
  const bool last_call_over = last_call_ && now >= *last_call_;
  bool need;
  if (joins_) {
    need = reread_ || (last_call_over && !read_after_last_call_);
  } else {
    need = join_count_ >= cfg_.max_nodes ||
           (join_count_ >= cfg_.min_nodes && !state_->expected.empty() && join_count_ >= live_expected()) || last_call_over;
  }
  if (!need) return;
  read_after_last_call_ = last_call_over;
  read_in_flight_ = true;
  out.read_joins = state_->round;
}

std::optional<EtcdRoundWrite> EtcdRoundCore::freeze(TimePoint now) {
  const EtcdRoundRecord& s = *state_;
  if (!waiting_ || join_round_ != s.round || !joins_) return std::nullopt;  // only a joiner that read the joins
  NodeRecord reference;
  try {
    reference = NodeRecord::from_json(s.reference);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  std::vector<const NodeRecord*> joined;
  for (const auto& j : *joins_) {
    const std::string& node = j.node.node_id;
    if (j.round == s.round && live(node) && exclusion_of(node, now) == nullptr &&
        (node == reference.node_id || j.node.mismatch(reference).empty())) {
      joined.push_back(&j.node);
    }
  }
  const int n = static_cast<int>(joined.size());
  if (n == 0 || n < cfg_.min_nodes) return std::nullopt;
  // The previous round's nodes, in node-rank order: its survivors keep their ranks.
  std::map<std::string, int> previous;
  const auto& ranked = s.previous.empty() ? s.expected : s.previous;
  for (std::size_t i = 0; i < ranked.size(); ++i) previous[ranked[i]] = static_cast<int>(i);
  const bool all_back = !s.expected.empty() && std::all_of(s.expected.begin(), s.expected.end(), [&](const std::string& e) {
    return !live(e) || std::any_of(joined.begin(), joined.end(), [&](auto* r) { return r->node_id == e; });
  });
  const bool last_call_over = last_call_ && now >= *last_call_;
  // Spares may fill max_nodes before the previous round's nodes are back: those come first.
  if (!((n >= cfg_.max_nodes && (s.expected.empty() || all_back)) || all_back || last_call_over)) return std::nullopt;
  joined = order_nodes(std::move(joined), previous, cfg_.max_nodes);
  EtcdRoundWrite w;
  w.next = s;
  w.next.phase = EtcdRoundRecord::Phase::kRunning;
  w.next.expected.clear();
  w.next.previous.clear();
  w.next.participants.clear();
  for (auto* r : joined) w.next.participants.push_back(r->node_id);
  w.next.master_addr = joined.front()->addr;
  w.next.master_port = joined.front()->free_port;
  w.next.state_endpoints = state_endpoints(joined);
  w.if_revision = state_revision_;
  return w;
}

EtcdRoundWrite EtcdRoundCore::reform(const EtcdRoundRecord& s, std::vector<std::string> expected, ControlEvent cause) const {
  EtcdRoundWrite w;
  w.next = s;
  w.next.phase = EtcdRoundRecord::Phase::kForming;
  w.next.round = s.round + 1;
  w.next.expected = std::move(expected);
  w.next.previous = s.participants;
  w.next.participants.clear();
  w.next.master_addr.clear();
  w.next.master_port = 0;
  w.next.state_endpoints.clear();
  cause.kind = ControlEvent::Kind::kStop;
  cause.round = s.round;
  cause.restart_count = w.next.restart_count;
  w.next.cause = std::move(cause);
  w.if_revision = state_revision_;
  return w;
}

EtcdRoundWrite EtcdRoundCore::close(const EtcdRoundRecord& s, int exit_code, const std::string& detail,
                                    const std::string& origin, const std::string& report) const {
  EtcdRoundWrite w;
  w.next = s;
  w.next.phase = EtcdRoundRecord::Phase::kClosed;
  ControlEvent c;
  c.kind = ControlEvent::Kind::kClosed;
  c.round = s.round;
  c.restart_count = s.restart_count;
  c.exit_code = exit_code;
  c.detail = detail;
  c.origin_node = origin;
  c.report = report;
  c.failure = exit_code != kExitSuccess;
  w.next.cause = std::move(c);
  w.if_revision = state_revision_;
  w.closes = true;
  return w;
}

std::optional<EtcdRoundWrite> EtcdRoundCore::fail(const RoundOutcome& o, TimePoint now) {
  const EtcdRoundRecord& s = *state_;
  const std::string me = self_.hostname + " (" + (self_.addr.empty() ? "" : self_.addr + ", ") + self_.node_id + ")";
  if (!o.stop_request.empty()) {
    return close(s, o.exit_code,
                 "node " + me + " asked to stop the job (exit code " + std::to_string(o.exit_code) + "): " + o.stop_request,
                 self_.node_id, o.report);
  }
  const std::string where = "worker failure on node " + self_.node_id + " (exit code " + std::to_string(o.exit_code) + "); ";
  // The job's ledger lives in the round record: every agent decides with the same one.
  ProgressLedger ledger(cfg_.no_progress_limit, s.best_step, s.no_progress_streak);
  const RestartDecision decision = decide_after_failure(s.restart_count, cfg_.max_restarts, o.exit_code, o.highest_step, ledger);
  if (!decision.restart()) {
    auto w = close(s, decision.exit_code, where + decision.reason, self_.node_id, o.report);
    w.next.best_step = ledger.best();
    w.next.no_progress_streak = ledger.streak();
    return w;
  }
  ControlEvent c;
  c.failure = true;
  c.origin_node = self_.node_id;
  c.report = o.report;
  c.detail = where + decision.reason;
  EtcdRoundRecord next = s;
  next.restart_count = s.restart_count + 1;
  next.best_step = ledger.best();
  next.no_progress_streak = ledger.streak();
  // The root cause: count it, and exclude this node when it is due and the job can go on without it.
  const bool asked = !o.exclude_request.empty();
  const int count = ++next.root_causes[self_.node_id];
  std::vector<std::string> expected = s.participants;
  if (asked || (cfg_.exclude_after > 0 && count >= cfg_.exclude_after)) {
    const std::string why = asked ? "a worker asked to exclude it: " + o.exclude_request : "the root cause " + std::to_string(count) + " times";
    if (replaceable(s, now)) {
      auto it = std::find_if(next.excluded.begin(), next.excluded.end(), [&](const ExcludedNode& e) { return e.node_id == self_.node_id; });
      if (it == next.excluded.end()) it = next.excluded.insert(next.excluded.end(), ExcludedNode{});
      it->node_id = self_.node_id;
      it->hostname = self_.hostname;
      it->addr = self_.addr;
      it->reason = why;
      ++it->times;
      const auto cooldown = cfg_.exclude_cooldown * (std::int64_t{1} << std::min(it->times - 1, 20));
      it->until_unix_ms = wall_ms(now) + cooldown.count();
      next.root_causes.erase(self_.node_id);
      ++next.exclusions_total;
      expected.erase(std::remove(expected.begin(), expected.end(), self_.node_id), expected.end());
      c.excluded = "excluded for " + seconds(cooldown) + " (exclusion " + std::to_string(it->times) + "): " + why;
      c.detail += "; node " + me + " " + c.excluded;
    } else if (asked) {
      return close(s, kExitNodeUnhealthy,
                   "node " + me + " asked to be excluded (" + o.exclude_request + "); no other node can replace it",
                   self_.node_id, o.report);
    } else {
      kept_line_ = "node " + me + " was the root cause " + std::to_string(count) + " times; kept: no other node can replace it";
    }
  }
  auto w = reform(next, expected, c);
  w.if_revision = state_revision_;
  return w;
}

void EtcdRoundCore::progress(TimePoint now, const std::string& line, EtcdRoundActions& out) {
  if (line == last_progress_ || now < last_progress_at_ + std::chrono::seconds(1)) return;
  last_progress_ = line;
  last_progress_at_ = now;
  out.progress.push_back(line);
}

}  // namespace crun
