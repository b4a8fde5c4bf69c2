#include "rendezvous/etcd_round_core.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <tuple>

#include "base/exit_codes.h"
#include "base/progress_ledger.h"

namespace crun {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string seconds(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::to_string((ms + 999) / 1000) + " s";
}

}  // namespace

EtcdRoundCore::EtcdRoundCore(RendezvousConfig config, EtcdKeys keys, NodeRecord self)
    : cfg_(std::move(config)), keys_(std::move(keys)), self_(std::move(self)) {}

void EtcdRoundCore::on_put(const std::string& key, const std::string& value, std::int64_t revision) {
  if (key == keys_.round()) {
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
    return;
  }
  const auto node_of = [&](const std::string& prefix) { return key.substr(prefix.size()); };
  try {
    if (starts_with(key, keys_.alive_prefix())) alive_[node_of(keys_.alive_prefix())] = revision;
    else if (starts_with(key, keys_.join_prefix())) joins_[node_of(keys_.join_prefix())] = EtcdJoinRecord::from_json(value);
    else if (starts_with(key, keys_.report_prefix())) reports_[node_of(keys_.report_prefix())] = EtcdReportRecord::from_json(value);
  } catch (const std::invalid_argument&) {
    // A malformed join or report counts as none: that node is not waiting, or did not report.
    if (starts_with(key, keys_.join_prefix())) joins_.erase(node_of(keys_.join_prefix()));
    if (starts_with(key, keys_.report_prefix())) reports_.erase(node_of(keys_.report_prefix()));
  }
}

void EtcdRoundCore::on_delete(const std::string& key, std::int64_t revision) {
  if (key == keys_.round()) {
    if (revision <= state_seen_) return;
    state_seen_ = revision;
    state_revision_ = 0;
    state_.reset();
    state_error_.clear();
    return;
  }
  if (starts_with(key, keys_.alive_prefix())) alive_.erase(key.substr(keys_.alive_prefix().size()));
  else if (starts_with(key, keys_.join_prefix())) joins_.erase(key.substr(keys_.join_prefix().size()));
  else if (starts_with(key, keys_.report_prefix())) reports_.erase(key.substr(keys_.report_prefix().size()));
}

void EtcdRoundCore::request_round(TimePoint now, std::uint16_t free_port) {
  waiting_ = true;
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

void EtcdRoundCore::publish_success(int round) {
  EtcdReportRecord r;
  r.round = round;
  r.outcome.succeeded = true;
  pending_puts_.emplace_back(keys_.report(self_.node_id), r.to_json());
}

bool EtcdRoundCore::in(const std::vector<std::string>& nodes, const std::string& node) const {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

EtcdRoundActions EtcdRoundCore::decide(TimePoint now) {
  EtcdRoundActions out;
  out.puts = std::move(pending_puts_);
  pending_puts_.clear();
  if (!loaded_) return out;
  deliver_controls(out);
  if (waiting_) answer_or_join(now, out);
  if (!write_in_flight_) {
    out.write = next_write(now, out);
    write_in_flight_ = out.write.has_value();
  }
  if (waiting_) {
    out.deadline = join_deadline_;
    if (min_reached_ && state_ && state_->phase == EtcdRoundRecord::Phase::kForming && min_reached_->first == state_->round) {
      out.deadline = std::min(*out.deadline, min_reached_->second + cfg_.last_call_timeout);
    }
  }
  return out;
}

void EtcdRoundCore::deliver_controls(EtcdRoundActions& out) {
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
  if (s.phase == EtcdRoundRecord::Phase::kForming) {
    if (join_round_ != s.round) {
      EtcdJoinRecord j;
      j.round = s.round;
      j.node = self_;
      out.puts.emplace_back(keys_.join(self_.node_id), j.to_json());
      join_round_ = s.round;
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
  out.answers.push_back(r);
  waiting_ = false;
  running_round_ = s.round;
  last_progress_.clear();
}

std::optional<EtcdRoundWrite> EtcdRoundCore::next_write(TimePoint now, EtcdRoundActions& out) {
  if (!state_error_.empty()) return std::nullopt;
  if (!state_) {
    if (!waiting_) return std::nullopt;
    EtcdRoundWrite w;
    w.next.reference = self_.to_json();
    w.if_revision = 0;
    return w;
  }
  const EtcdRoundRecord& s = *state_;
  if (s.phase == EtcdRoundRecord::Phase::kClosed) return std::nullopt;
  if (failure_ && (s.phase != EtcdRoundRecord::Phase::kRunning || s.round != failure_->first)) failure_.reset();
  if (s.phase == EtcdRoundRecord::Phase::kForming) return freeze(now, out);

  // Running.
  std::vector<std::string> gone;
  for (const auto& p : s.participants) {
    if (!alive_.count(p)) gone.push_back(p);
  }
  if (!gone.empty() && alive_.count(self_.node_id)) {
    std::vector<std::string> rest;
    for (const auto& p : s.participants) {
      if (alive_.count(p)) rest.push_back(p);
    }
    ControlEvent c;
    c.detail = "node " + gone.front() + (gone.size() > 1 ? " and " + std::to_string(gone.size() - 1) + " more" : "") +
               " lost: its agent left or its etcd lease expired";
    return reform(s, rest, c);
  }
  if (failure_ && in(s.participants, self_.node_id)) {
    auto w = fail(failure_->second);
    failure_.reset();
    return w;
  }
  const bool all_succeeded = std::all_of(s.participants.begin(), s.participants.end(), [&](const std::string& p) {
    auto r = reports_.find(p);
    return r != reports_.end() && r->second.round == s.round && r->second.outcome.succeeded;
  });
  if (all_succeeded) return close(s, kExitSuccess, "all " + std::to_string(s.participants.size()) + " nodes succeeded", {}, {});
  if (waiting_ && !in(s.participants, self_.node_id) && static_cast<int>(s.participants.size()) < cfg_.max_nodes &&
      alive_.count(self_.node_id)) {
    ControlEvent c;
    c.detail = "node " + self_.node_id + " joined: scaling up";
    return reform(s, s.participants, c);
  }
  return std::nullopt;
}

std::optional<EtcdRoundWrite> EtcdRoundCore::freeze(TimePoint now, EtcdRoundActions& out) {
  const EtcdRoundRecord& s = *state_;
  if (!waiting_ || join_round_ != s.round) return std::nullopt;  // only the nodes joining it decide
  NodeRecord reference;
  try {
    reference = NodeRecord::from_json(s.reference);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  std::vector<const NodeRecord*> joined;
  for (const auto& [node, j] : joins_) {
    if (j.round == s.round && alive_.count(node) && (node == reference.node_id || j.node.mismatch(reference).empty())) {
      joined.push_back(&j.node);
    }
  }
  const int n = static_cast<int>(joined.size());
  if (n == 0) return std::nullopt;
  std::map<std::string, int> previous;
  for (std::size_t i = 0; i < s.expected.size(); ++i) previous[s.expected[i]] = static_cast<int>(i);
  const auto order = [&](const NodeRecord* r) {
    auto p = previous.find(r->node_id);
    return std::tuple(r->rank_hint >= 0 ? r->rank_hint : INT_MAX, p != previous.end() ? p->second : INT_MAX, r->node_id);
  };
  std::sort(joined.begin(), joined.end(), [&](auto* a, auto* b) { return order(a) < order(b); });
  const bool all_back = !s.expected.empty() && std::all_of(s.expected.begin(), s.expected.end(), [&](const std::string& e) {
    return !alive_.count(e) || std::any_of(joined.begin(), joined.end(), [&](auto* r) { return r->node_id == e; });
  });
  bool now_ = n >= cfg_.max_nodes || (n >= cfg_.min_nodes && all_back);
  if (!now_ && n >= cfg_.min_nodes) {
    if (!min_reached_ || min_reached_->first != s.round) min_reached_ = std::pair{s.round, now};
    now_ = now >= min_reached_->second + cfg_.last_call_timeout;
  } else if (n < cfg_.min_nodes) {
    min_reached_.reset();
  }
  if (!now_) {
    if (joined.front()->node_id == self_.node_id) {  // one line per round, from its first node
      std::string line = "round " + std::to_string(s.round) + ": " + std::to_string(n) + "/" + std::to_string(cfg_.max_nodes) + " nodes";
      if (n >= cfg_.min_nodes && min_reached_) {
        line += ", last call in " + seconds(min_reached_->second + cfg_.last_call_timeout - now);
      } else {
        line += ", waiting for " + std::to_string(cfg_.min_nodes);
      }
      progress(now, line, out);
    }
    return std::nullopt;
  }
  if (n > cfg_.max_nodes) joined.resize(cfg_.max_nodes);
  EtcdRoundWrite w;
  w.next = s;
  w.next.phase = EtcdRoundRecord::Phase::kRunning;
  w.next.expected.clear();
  w.next.participants.clear();
  for (auto* r : joined) w.next.participants.push_back(r->node_id);
  w.next.master_addr = joined.front()->addr;
  w.next.master_port = joined.front()->free_port;
  w.if_revision = state_revision_;
  min_reached_.reset();
  return w;
}

EtcdRoundWrite EtcdRoundCore::reform(const EtcdRoundRecord& s, std::vector<std::string> expected, ControlEvent cause) const {
  EtcdRoundWrite w;
  w.next = s;
  w.next.phase = EtcdRoundRecord::Phase::kForming;
  w.next.round = s.round + 1;
  w.next.expected = std::move(expected);
  w.next.participants.clear();
  w.next.master_addr.clear();
  w.next.master_port = 0;
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

std::optional<EtcdRoundWrite> EtcdRoundCore::fail(const RoundOutcome& o) {
  const EtcdRoundRecord& s = *state_;
  const std::string where = "worker failure on node " + self_.node_id + " (exit code " + std::to_string(o.exit_code) + ")";
  if (s.restart_count >= cfg_.max_restarts) {
    return close(s, o.exit_code, where + "; no restarts left (max " + std::to_string(cfg_.max_restarts) + ")",
                 self_.node_id, o.report);
  }
  ProgressLedger ledger(cfg_.no_progress_limit, s.best_step, s.no_progress_streak);
  const bool stuck = ledger.end_attempt(o.highest_step);
  if (stuck) {
    auto w = close(s, kExitNoProgress,
                   where + "; " + std::to_string(ledger.streak()) + " restarts in a row made no progress (highest step " +
                       (ledger.best() ? std::to_string(*ledger.best()) : std::string("none")) + ")",
                   self_.node_id, o.report);
    w.next.best_step = ledger.best();
    w.next.no_progress_streak = ledger.streak();
    return w;
  }
  ControlEvent c;
  c.failure = true;
  c.origin_node = self_.node_id;
  c.report = o.report;
  c.detail = where + "; restart " + std::to_string(s.restart_count + 1) + " of " + std::to_string(cfg_.max_restarts);
  EtcdRoundRecord next = s;
  next.restart_count = s.restart_count + 1;
  next.best_step = ledger.best();
  next.no_progress_streak = ledger.streak();
  auto w = reform(next, s.participants, c);
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
