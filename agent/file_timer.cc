#include "agent/file_timer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace crun {

namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) throw std::invalid_argument(std::string("the timer request has no \"") + name + "\"");
  return *it;
}

int integer_field(const nlohmann::json& j, const char* name) {
  const auto& v = field(j, name);
  if (!v.is_number_integer()) throw std::invalid_argument(std::string("\"") + name + "\" is not an integer");
  auto n = v.get<long long>();
  if (n < -(1LL << 31) || n >= (1LL << 31)) throw std::invalid_argument(std::string("\"") + name + "\" is out of range");
  return static_cast<int>(n);
}

}  // namespace

FileTimerRequest parse_file_timer_request(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::invalid_argument("the timer request is not JSON");
  if (!j.is_object()) throw std::invalid_argument("the timer request is not a JSON object");
  FileTimerRequest r;
  r.pid = integer_field(j, "pid");
  if (r.pid <= 0) throw std::invalid_argument("\"pid\" is not a process id");
  const auto& scope = field(j, "scope_id");
  if (!scope.is_string()) throw std::invalid_argument("\"scope_id\" is not a string");
  r.scope_id = scope.get<std::string>();
  if (r.scope_id.size() > FileTimerTable::kMaxScopeIdBytes) throw std::invalid_argument("\"scope_id\" is too long");
  const auto& t = field(j, "expiration_time");
  if (!t.is_number()) throw std::invalid_argument("\"expiration_time\" is not a number");
  r.expiration_time = t.get<double>();
  if (!std::isfinite(r.expiration_time)) throw std::invalid_argument("\"expiration_time\" is not finite");
  r.signal = integer_field(j, "signal");
  return r;
}

void LineSplitter::feed(std::string_view bytes, const std::function<void(std::string_view line)>& on_line,
                        const std::function<void()>& on_oversized) {
  while (!bytes.empty()) {
    const auto nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    if (!dropping_) {
      if (partial_.size() + piece.size() > max_line_) {
        dropping_ = true;
        partial_.clear();
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) return;
    bytes.remove_prefix(nl + 1);
    if (dropping_) {
      dropping_ = false;
      on_oversized();
    } else {
      on_line(partial_);
    }
    partial_.clear();
  }
}

bool FileTimerTable::apply(const FileTimerRequest& request) {
  auto key = std::make_pair(request.pid, request.scope_id);
  auto it = timers_.find(key);
  if (request.expiration_time < 0) {
    if (it != timers_.end()) {
      timers_.erase(it);
      if (--scopes_of_pid_[request.pid] == 0) scopes_of_pid_.erase(request.pid);
    }
    return true;
  }
  if (it != timers_.end()) {
    it->second = request;
    return true;
  }
  auto held = scopes_of_pid_.find(request.pid);
  if (timers_.size() >= kMaxTimers || (held != scopes_of_pid_.end() && held->second >= kMaxScopesPerPid)) return false;
  timers_.emplace(std::move(key), request);
  ++scopes_of_pid_[request.pid];
  return true;
}

std::vector<FileTimerRequest> FileTimerTable::expire(double now) {
  std::vector<FileTimerRequest> due;
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->second.expiration_time <= now) {
      due.push_back(std::move(it->second));
      if (--scopes_of_pid_[it->first.first] == 0) scopes_of_pid_.erase(it->first.first);
      it = timers_.erase(it);
    } else {
      ++it;
    }
  }
  std::stable_sort(due.begin(), due.end(),
                   [](const auto& a, const auto& b) { return a.expiration_time < b.expiration_time; });
  return due;
}

std::optional<double> FileTimerTable::next_expiry() const {
  std::optional<double> first;
  for (const auto& [key, t] : timers_) {
    if (!first || t.expiration_time < *first) first = t.expiration_time;
  }
  return first;
}

void FileTimerTable::forget(int pid) {
  auto from = timers_.lower_bound(std::make_pair(pid, std::string()));
  auto to = from;
  while (to != timers_.end() && to->first.first == pid) ++to;
  timers_.erase(from, to);
  scopes_of_pid_.erase(pid);
}

}  // namespace crun
