#include "agent/line_collapse.h"

#include <algorithm>

namespace crun {

LineCollapse::LineCollapse(Limits limits) : limits_(limits), max_lines_(limits.max_lines), max_bytes_(limits.max_bytes) {}

void LineCollapse::begin(const std::vector<bool>& shown, Prefix prefix, std::string& out) {
  flush(out);
  prefix_ = std::move(prefix);
  prefix_ranks_.clear();
  prefix_text_.clear();
  last_seq_.assign(shown.size(), 0);
  ended_.assign(shown.size(), false);
  for (std::size_t r = 0; r < shown.size(); ++r) ended_[r] = !shown[r];
  const auto ranks = static_cast<std::size_t>(std::count(shown.begin(), shown.end(), true));
  max_lines_ = std::max(limits_.max_lines, ranks * limits_.lines_per_rank);
  max_bytes_ = std::max(limits_.max_bytes, ranks * limits_.bytes_per_rank);
  lagging_ = 0;
}

void LineCollapse::grow(int rank) {
  const auto need = static_cast<std::size_t>(rank) + 1;
  if (last_seq_.size() >= need) return;
  last_seq_.resize(need, 0);
  ended_.resize(need, false);
}

void LineCollapse::add(int rank, std::string_view line, Clock::time_point now, std::string& out) {
  if (rank < 0) return;
  grow(rank);
  const auto r = static_cast<std::size_t>(rank);
  Held* join = nullptr;
  if (auto it = by_text_.find(line); it != by_text_.end()) {
    const auto& same = it->second;
    const auto later = std::upper_bound(same.begin(), same.end(), last_seq_[r],
                                        [](std::uint64_t seq, const Held* h) { return seq < h->seq; });
    if (later != same.end()) join = *later;
  }
  if (join != nullptr) {
    join->ranks.push_back(rank);
    bytes_ += sizeof(int);
  } else {
    held_.push_back(Held{next_seq_++, std::string(line), {rank}, now + limits_.window});
    join = &held_.back();
    by_text_[join->text].push_back(join);
    bytes_ += join->text.size() + sizeof(int) + kLineOverhead;
  }
  last_seq_[r] = join->seq;
  release(now, out);
}

void LineCollapse::end_rank(int rank, Clock::time_point now, std::string& out) {
  if (rank < 0) return;
  grow(rank);
  ended_[static_cast<std::size_t>(rank)] = true;
  release(now, out);
}

void LineCollapse::expire(Clock::time_point now, std::string& out) { release(now, out); }

void LineCollapse::flush(std::string& out) {
  while (!held_.empty()) emit_oldest(out);
}

std::optional<LineCollapse::Clock::time_point> LineCollapse::next_deadline() const {
  if (held_.empty()) return std::nullopt;
  return held_.front().deadline;
}

// No rank can still join the oldest line: each has ended or has a later line. The rank found
// lagging last time is asked first, so a rank that stays behind costs one check per call.
bool LineCollapse::oldest_complete() {
  const std::uint64_t seq = held_.front().seq;
  const std::size_t n = last_seq_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t r = (lagging_ + i) % n;
    if (!ended_[r] && last_seq_[r] < seq) {
      lagging_ = r;
      return false;
    }
  }
  return true;
}

void LineCollapse::release(Clock::time_point now, std::string& out) {
  while (!held_.empty()) {
    const bool over = held_.size() > max_lines_ || bytes_ > max_bytes_;
    if (!over && held_.front().deadline > now && !oldest_complete()) return;
    emit_oldest(out);
  }
}

void LineCollapse::emit_oldest(std::string& out) {
  Held& h = held_.front();
  std::sort(h.ranks.begin(), h.ranks.end());
  if (h.ranks != prefix_ranks_) {  // empty after begin(); a line's ranks never are
    prefix_ranks_ = h.ranks;
    prefix_text_ = prefix_ ? prefix_(h.ranks) : std::string();
  }
  out += prefix_text_;
  out += h.text;
  // The oldest line is the first of its text's list (the lists are in seq order).
  auto it = by_text_.find(h.text);
  auto& same = it->second;
  same.erase(same.begin());
  if (same.empty()) {
    by_text_.erase(it);
  } else {  // the key viewed the text going now: it views the next line's (the same text)
    auto node = by_text_.extract(it);
    node.key() = node.mapped().front()->text;
    by_text_.insert(std::move(node));
  }
  bytes_ -= h.text.size() + sizeof(int) * h.ranks.size() + kLineOverhead;
  held_.pop_front();
}

}  // namespace crun
