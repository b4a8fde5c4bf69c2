#include "agent/failure_report.h"

#include <cstdio>
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "agent/file_text.h"
#include "agent/signal_names.h"
#include "agent/stack_text.h"
#include "base/utc_text.h"

namespace crun {
namespace {

std::string iso_time(std::chrono::system_clock::time_point t) {
  return utc_text(std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count(), 3);
}

// "2026-01-02T03:04:05.678Z" as iso_time writes it; nullopt for anything else.
std::optional<std::chrono::system_clock::time_point> parse_iso_time(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  char z = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms, &z) != 8 ||
      z != 'Z' || tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
      tm.tm_hour < 0 || tm.tm_hour > 23 || tm.tm_min < 0 || tm.tm_min > 59 || tm.tm_sec < 0 || tm.tm_sec > 60 ||
      ms < 0 || ms > 999) {
    return std::nullopt;  // also what iso_time cannot write back (before 1970)
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = ::timegm(&tm);
  if (secs == static_cast<std::time_t>(-1)) return std::nullopt;
  // system_clock counts nanoseconds in 64 bits: beyond 2262 the time cannot be held.
  constexpr auto kLast = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::duration::max()).count() - 1;
  if (secs > kLast) return std::nullopt;
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

constexpr std::size_t kTracebackLines = 40;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    const auto end = nl == std::string::npos ? text.size() : nl;
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  while (!out.empty() && out.back().find_first_not_of(" \t\r") == std::string::npos) out.pop_back();
  return out;
}

// The worker's stderr already shows the traceback when its last line is in the tail.
bool tail_shows(const std::vector<std::string>& tail, const std::string& line) {
  for (const auto& t : tail) {
    if (t == line) return true;
  }
  return false;
}

}  // namespace

std::string FailureReport::format_text() const {
  std::ostringstream os;
  os << "crun: worker failed (root cause): rank " << rank << " (local rank " << local_rank
     << ", role " << role << ") on " << host << (addr.empty() ? "" : " (" + addr + ")") << ", pid " << pid << ", " << status.describe()
     << ", at " << iso_time(time) << ", attempt " << restart_count << "; "
     << (restarting ? "restarting the group"
         : no_progress ? "stopping: the restarts make no progress"
         : !request.empty() ? "no restart: the worker asked for none"
                            : "no restarts left")
     << "\n";
  if (!watchdog.empty()) os << "crun:   watchdog: " << watchdog << "\n";
  if (!excluded.empty()) os << "crun:   node " << excluded << "\n";
  if (!request.empty()) os << "crun:   request (CRUN_CONTROL_FILE): " << request << "\n";
  if (!error_message.empty()) os << "crun:   error file: " << error_message << "\n";
  for (const auto& s : stacks) {
    if (s.rank != rank) continue;
    if (const std::string where = where_text(s); !where.empty()) os << "crun:   stack: rank " << rank << " was in " << where << "\n";
    if (!s.flight_dump.empty() && s.flight_error.empty()) {
      os << "crun:   NCCL flight recorder dump: " << s.flight_dump << " (" << s.flight_dump_bytes << " bytes)\n";
    }
  }
  const auto traceback = split_lines(error_traceback);
  if (!traceback.empty() && !tail_shows(stderr_tail, traceback.back())) {
    const std::size_t skip = traceback.size() > kTracebackLines ? traceback.size() - kTracebackLines : 0;
    os << "crun:   traceback from the error file";
    if (skip > 0) os << " (last " << kTracebackLines << " of " << traceback.size() << " lines)";
    os << ":\n";
    for (std::size_t i = skip; i < traceback.size(); ++i) os << "crun:   | " << traceback[i] << "\n";
  }
  if (!stderr_tail.empty()) {
    os << "crun:   last " << stderr_tail.size() << " stderr line(s) of rank " << rank << ":\n";
    for (const auto& line : stderr_tail) os << "crun:   | " << line << "\n";
  }
  if (!stack_groups.empty()) os << stack_groups.text("crun:   ");
  if (!stacks_missing_nodes.empty()) {
    os << "crun:   no stacks before the kill came from node rank(s)";
    for (std::size_t i = 0; i < stacks_missing_nodes.size(); ++i) os << (i == 0 ? " " : ", ") << stacks_missing_nodes[i];
    os << "\n";
  }
  return os.str();
}

std::string FailureReport::to_json() const {
  nlohmann::json j;
  j["role"] = role;
  j["attempt"] = restart_count;
  j["restarting"] = restarting;
  j["no_progress"] = no_progress;
  if (!excluded.empty()) j["excluded"] = excluded;
  j["rank"] = rank;
  j["local_rank"] = local_rank;
  j["host"] = host;
  if (addr.empty()) {
    j["addr"] = nullptr;
  } else {
    j["addr"] = addr;
  }
  j["pid"] = pid;
  j["exit_code"] = status.crun_exit_code();
  if (status.signaled()) {
    j["signal"] = signal_name(status.signal());
  } else {
    j["signal"] = nullptr;
  }
  j["time"] = iso_time(time);
  j["error_file"] = error_file;
  j["error_message"] = error_message;
  j["error_traceback"] = error_traceback;
  j["stderr_tail"] = stderr_tail;
  if (watchdog.empty()) {
    j["watchdog"] = nullptr;
  } else {
    j["watchdog"] = watchdog;
  }
  if (!request.empty()) j["request"] = request;
  if (!stacks.empty()) {
    auto& list = j["stacks"] = nlohmann::json::array();
    for (const auto& s : stacks) {
      list.push_back({{"rank", s.rank}, {"local_rank", s.local_rank}, {"pid", s.pid}, {"threads", s.threads},
                      {"python_threads", s.python_threads}, {"error", s.error}});
      if (!s.flight_dump.empty()) {
        list.back()["flight_recorder"] = {{"file", s.flight_dump}, {"bytes", s.flight_dump_bytes}, {"error", s.flight_error}};
      }
    }
  }
  if (!stack_groups.empty()) j["stack_groups"] = nlohmann::json::parse(stack_groups.to_json());
  if (!stacks_missing_nodes.empty()) j["stacks_missing_nodes"] = stacks_missing_nodes;
  // A worker's stderr need not be UTF-8: invalid bytes become U+FFFD instead of an exception.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {
// An integer within int's range, or nothing: nlohmann's get<int>() converts a float or a wider
// number silently, and a float beyond int's range is undefined behaviour (a peer's report may
// carry any number).
std::optional<int> int_field(const nlohmann::json& j, const char* name) {
  const auto& v = j.at(name);
  if (v.is_number_unsigned()) {
    if (std::in_range<int>(v.get<std::uint64_t>())) return static_cast<int>(v.get<std::uint64_t>());
  } else if (v.is_number_integer()) {
    if (std::in_range<int>(v.get<std::int64_t>())) return static_cast<int>(v.get<std::int64_t>());
  }
  return std::nullopt;
}
}  // namespace

std::optional<FailureReport> FailureReport::from_json(std::string_view text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object()) return std::nullopt;
    FailureReport r;
    r.role = j.at("role").get<std::string>();
    const auto attempt = int_field(j, "attempt"), rank = int_field(j, "rank"), local_rank = int_field(j, "local_rank"),
               pid = int_field(j, "pid"), exit_code = int_field(j, "exit_code");
    if (!attempt || !rank || !local_rank || !pid || !exit_code) return std::nullopt;
    r.restart_count = *attempt;
    r.restarting = j.at("restarting").get<bool>();
    if (auto n = j.find("no_progress"); n != j.end()) r.no_progress = n->get<bool>();
    if (auto n = j.find("excluded"); n != j.end()) r.excluded = n->get<std::string>();
    r.rank = *rank;
    r.local_rank = *local_rank;
    r.host = j.at("host").get<std::string>();
    r.addr = j.at("addr").is_null() ? std::string() : j.at("addr").get<std::string>();
    r.pid = *pid;
    const auto status = ExitStatus::from_crun_exit_code(*exit_code, !j.at("signal").is_null());
    if (!status) return std::nullopt;
    r.status = *status;
    const auto time = parse_iso_time(j.at("time").get<std::string>());
    if (!time) return std::nullopt;
    r.time = *time;
    r.error_file = j.at("error_file").get<std::string>();
    r.error_message = j.at("error_message").get<std::string>();
    r.error_traceback = j.at("error_traceback").get<std::string>();
    r.stderr_tail = j.at("stderr_tail").get<std::vector<std::string>>();
    if (auto w = j.find("watchdog"); w != j.end() && !w->is_null()) r.watchdog = w->get<std::string>();
    if (auto q = j.find("request"); q != j.end() && !q->is_null()) r.request = q->get<std::string>();
    if (auto st = j.find("stacks"); st != j.end() && !st->is_null()) {
      for (const auto& e : st->get_ref<const nlohmann::json::array_t&>()) {
        RankStack s;
        const auto srank = int_field(e, "rank"), slocal = int_field(e, "local_rank"), spid = int_field(e, "pid");
        if (!srank || !slocal || !spid) return std::nullopt;
        s.rank = *srank;
        s.local_rank = *slocal;
        s.pid = *spid;
        s.threads = e.at("threads").get<std::vector<std::vector<std::string>>>();
        s.python_threads = e.at("python_threads").get<std::vector<std::vector<std::string>>>();
        s.error = e.at("error").get<std::string>();
        if (auto f = e.find("flight_recorder"); f != e.end() && f->is_object()) {
          s.flight_dump = f->at("file").get<std::string>();
          const auto& bytes = f->at("bytes");
          if (!bytes.is_number_unsigned()) return std::nullopt;  // a float or a sign: no size
          s.flight_dump_bytes = bytes.get<std::uint64_t>();
          s.flight_error = f->at("error").get<std::string>();
        }
        r.stacks.push_back(std::move(s));
      }
    }
    if (auto g = j.find("stack_groups"); g != j.end() && !g->is_null()) {
      auto groups = StackGroups::from_json(g->dump());
      if (!groups) return std::nullopt;
      r.stack_groups = std::move(*groups);
    }
    if (auto m = j.find("stacks_missing_nodes"); m != j.end()) {
      if (!m->is_array() || m->size() > 4096) return std::nullopt;
      for (const auto& n : *m) {
        if (!n.is_number_integer() || n.get<std::int64_t>() < 0 || !std::in_range<int>(n.get<std::int64_t>())) return std::nullopt;
        r.stacks_missing_nodes.push_back(static_cast<int>(n.get<std::int64_t>()));
      }
    }
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string read_error_file_message(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) return {};
  try {
    const auto j = nlohmann::json::parse(*text);
    if (!j.contains("message")) return {};
    const auto& m = j["message"];
    if (m.is_string()) return m.get<std::string>();
    if (m.is_object() && m.contains("message") && m["message"].is_string()) {
      return m["message"].get<std::string>();
    }
    return m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // stderr need not be UTF-8
  } catch (const std::exception&) {
    return {};
  }
}

std::string read_error_file_traceback(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) return {};
  try {
    const auto j = nlohmann::json::parse(*text);
    const auto ptr = nlohmann::json::json_pointer("/message/extraInfo/py_callstack");
    if (!j.contains(ptr) || !j.at(ptr).is_string()) return {};
    return j.at(ptr).get<std::string>();
  } catch (const std::exception&) {
    return {};
  }
}

std::string copy_error_file_to_parent(const std::string& worker_file, const std::string& parent_file,
                                      const ExitStatus& status) {
  const auto text = read_text_file(worker_file);
  if (!text) return "the worker wrote no error file";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    return std::string("the worker's error file is not JSON (") + e.what() + ")";
  }
  const int error_code = status.torch_exitcode();
  if (error_code != 0 && j.is_object() && j.contains("message") && j["message"].is_object()) {
    j["message"]["errorCode"] = error_code;  // the worker could not know it when a signal killed it
  }
  if (!write_text_file(parent_file, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))) {
    return "cannot write " + parent_file;
  }
  return {};
}

}  // namespace crun
