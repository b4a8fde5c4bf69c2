#include "agent/state_ledger.h"

namespace crun {

bool is_state_name(std::string_view name) {
  return !name.empty() && name.front() != '.' && name.find('/') == std::string_view::npos;
}

StateLedger::Commit StateLedger::commit(int rank, const std::string& name, const StateFileFacts& facts,
                                        std::uint64_t max_bytes) {
  Rank& r = ranks_[rank];
  const auto old = r.files.find(name);
  if (old != r.files.end() && old->second.facts.same_file(facts)) return {Verdict::kSame, r.bytes};
  const std::uint64_t previous = old == r.files.end() ? 0 : old->second.facts.size;
  const std::uint64_t needed = r.bytes - previous + facts.size;
  if (needed > max_bytes) return {Verdict::kRefuse, needed};
  r.bytes = needed;
  r.files[name] = CommittedEntry{facts, ++r.sequence};
  return {Verdict::kAccepted, needed};
}

bool StateLedger::gone(int rank, const std::string& name, const std::optional<StateFileFacts>& now) {
  Rank& r = ranks_[rank];
  const auto it = r.files.find(name);
  if (it == r.files.end()) return false;
  if (now && now->same_file(it->second.facts)) return false;
  r.bytes -= it->second.facts.size;
  r.files.erase(it);
  ++r.sequence;
  return true;
}

bool StateLedger::modified(int rank, const std::string& name, std::uint64_t inode) {
  Rank& r = ranks_[rank];
  const auto it = r.files.find(name);
  if (it == r.files.end() || it->second.facts.inode != inode) return false;
  r.bytes -= it->second.facts.size;
  r.files.erase(it);
  ++r.sequence;
  return true;
}

void StateLedger::replace(int rank, std::map<std::string, CommittedEntry> files, std::uint64_t sequence) {
  Rank& r = ranks_[rank];
  r.files = std::move(files);
  r.bytes = 0;
  for (const auto& [name, entry] : r.files) r.bytes += entry.facts.size;
  r.sequence = sequence;
}

const std::map<std::string, CommittedEntry>& StateLedger::committed(int rank) const {
  static const std::map<std::string, CommittedEntry> none;
  const auto it = ranks_.find(rank);
  return it == ranks_.end() ? none : it->second.files;
}

std::uint64_t StateLedger::bytes(int rank) const {
  const auto it = ranks_.find(rank);
  return it == ranks_.end() ? 0 : it->second.bytes;
}

std::uint64_t StateLedger::sequence(int rank) const {
  const auto it = ranks_.find(rank);
  return it == ranks_.end() ? 0 : it->second.sequence;
}

}  // namespace crun
