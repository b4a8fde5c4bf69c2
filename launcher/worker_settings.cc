#include "launcher/worker_settings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <set>

#include "agent/signal_names.h"
#include "agent/worker_process.h"
#include "launcher/option_values.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

int parse_nproc(const std::string& text, const HostFacts& host) {
  if (text == "cpu") return host.cpus.get();
  if (text == "gpu") {
    if (host.gpus.get() == 0) usage("--nproc-per-node gpu: no GPU found on this node");
    return host.gpus.get();
  }
  if (text == "auto") return host.gpus.get() > 0 ? host.gpus.get() : host.cpus.get();
  const auto v = parse_long(text);
  if (!v || *v < 1 || *v > 65536) {
    usage("--nproc-per-node: expected a positive integer, cpu, gpu or auto, got '" + text + "'");
  }
  return static_cast<int>(*v);
}

// torchrun's Std spec: "0".."3" for every rank, or "0:1,1:2" per local rank.
std::vector<unsigned> parse_std(const std::string& flag, const std::string& text, int nproc) {
  std::vector<unsigned> out(static_cast<std::size_t>(nproc), 0u);
  const std::string t = trim(text);
  if (t.empty()) return out;
  auto std_value = [&](const std::string& v) {
    const auto n = parse_long(v);
    if (!n || *n < 0 || *n > 3) usage(flag + ": expected 0-3 or LOCAL_RANK:0-3,..., got '" + text + "'");
    return static_cast<unsigned>(*n);
  };
  if (t.find(':') == std::string::npos) {
    const unsigned v = std_value(t);
    for (auto& x : out) x = v;
    return out;
  }
  for (const auto& item : split(t, ',')) {
    const auto kv = split(item, ':');
    if (kv.size() != 2) usage(flag + ": expected 0-3 or LOCAL_RANK:0-3,..., got '" + text + "'");
    const auto rank = parse_long(kv[0]);
    if (!rank || *rank < 0) usage(flag + ": bad local rank in '" + text + "'");
    const unsigned v = std_value(kv[1]);
    if (*rank < nproc) out[static_cast<std::size_t>(*rank)] = v;
  }
  return out;
}

std::vector<bool> parse_console(const std::string& text, int nproc) {
  if (trim(text).empty()) return std::vector<bool>(static_cast<std::size_t>(nproc), true);
  std::vector<bool> out(static_cast<std::size_t>(nproc), false);
  for (const auto& item : split(text, ',')) {
    const auto r = parse_long(item);
    if (!r || *r < 0) usage("--local-ranks-filter: expected comma-separated local ranks, got '" + text + "'");
    if (*r < nproc) out[static_cast<std::size_t>(*r)] = true;
  }
  return out;
}

// SIGTERM, SIGINT, SIGHUP and SIGQUIT (torchrun's four) and SIGUSR1/SIGUSR2 (Slurm's preemption
// notices: `--signal=USR1@60`) are always handled; --signals-to-handle adds more.
std::vector<int> parse_signals(const std::string& text) {
  std::vector<int> out = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  std::set<int> seen(out.begin(), out.end());
  for (const auto& name : split(text, ',')) {
    if (trim(name).empty()) continue;
    const auto s = signal_number(trim(name));
    if (!s || *s == SIGKILL || *s == SIGSTOP || *s == SIGCHLD) usage("--signals-to-handle: cannot handle '" + trim(name) + "'");
    if (seen.insert(*s).second) out.push_back(*s);
  }
  return out;
}

// A number of seconds as text (nullopt: not a number).
std::optional<double> parse_double_text(const std::string& text) {
  const std::string t = trim(text);
  char* end = nullptr;
  const double v = t.empty() ? 0 : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// --log-dir: a directory, or a path crun can make one at; its nearest existing part must be a
// directory ("" = none given).
std::string check_log_dir(const std::string& path) {
  std::string part = path;
  struct stat st;
  while (!part.empty() && ::stat(part.c_str(), &st) != 0) {
    const auto slash = part.find_last_of('/');
    part = slash == std::string::npos ? "" : part.substr(0, slash);
  }
  if (!part.empty() && !S_ISDIR(st.st_mode)) usage("--log-dir: " + part + " is not a directory");
  return path;
}

}  // namespace

void plan_workers(const SettingTexts& s, const HostFacts& host, LaunchPlan& plan) {
  const auto& nproc = s.at("nproc_per_node");
  plan.nproc_per_node = {parse_setting(nproc, [&](const std::string& t) { return parse_nproc(t, host); }), nproc.source};
  const int n = plan.nproc_per_node.value;

  plan.max_restarts = {int_setting(s, "max_restarts", "--max-restarts"), s.at("max_restarts").source};
  if (plan.max_restarts.value < 0) usage("--max-restarts: must be >= 0, got " + std::to_string(plan.max_restarts.value));
  if (number_setting(s, "monitor_interval", "--monitor-interval") < 0) usage("--monitor-interval: must be >= 0");
  const std::string& start_method = s.at("start_method").value;
  if (start_method != "spawn" && start_method != "fork" && start_method != "forkserver") {
    usage("--start-method: expected spawn, fork or forkserver, got '" + start_method + "'");
  }
  // --stop-timeout and torch's --shutdown-timeout are one setting: an error names the one given.
  const auto& stop_source = s.at("stop_timeout").source;
  const std::string stop_flag = stop_source.rfind("--", 0) == 0 ? stop_source : "--stop-timeout";
  const double stop_timeout = number_setting(s, "stop_timeout", stop_flag);
  if (!(stop_timeout >= 0) || stop_timeout > 1e6) usage(stop_flag + ": expected seconds >= 0");
  plan.stop_timeout = {std::chrono::milliseconds(static_cast<long long>(stop_timeout * 1000.0)), s.at("stop_timeout").source};
  plan.role = s.at("role");
  if (plan.role.value.empty()) usage("--role: must not be empty");
  const double capture = number_setting(s, "capture_timeout", "--capture-timeout");
  if (!(capture >= 0) || capture > 3600) usage("--capture-timeout: expected seconds from 0 (off) to 3600");
  plan.capture_timeout = {std::chrono::milliseconds(static_cast<long long>(capture * 1000.0)), s.at("capture_timeout").source};
  plan.python_stacks = {s.at("no_python_stacks").value != "1", s.at("no_python_stacks").source};
  const auto& state_max = s.at("state_max_bytes");
  const auto state_bytes = parse_byte_size(state_max.value);
  if (!state_bytes || *state_bytes == 0) {
    usage(state_max.source + ": expected a size > 0 such as 256MiB, 1GiB or a number of bytes, got '" + state_max.value + "'");
  }
  plan.state_max_bytes = {*state_bytes, state_max.source};
  plan.state_persist_dir = s.at("state_persist_dir");

  const auto per_rank = [&](const char* key, auto parse) {
    return Sourced<decltype(parse(std::string()))>{parse_setting(s.at(key), parse), s.at(key).source};
  };
  plan.redirects = per_rank("redirects", [n](const std::string& t) { return parse_std("--redirects", t, n); });
  plan.tee = per_rank("tee", [n](const std::string& t) { return parse_std("--tee", t, n); });
  plan.console = per_rank("local_ranks_filter", [n](const std::string& t) { return parse_console(t, n); });
  plan.handled_signals = per_rank("signals_to_handle", parse_signals);
  plan.log_dir = per_rank("log_dir", check_log_dir);
  plan.hostname = host.hostname;
}

void plan_watchdogs(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan) {
  const auto seconds = [&](const char* key, const char* flag) {
    const double v = number_setting(s, key, flag);
    if (!(v >= 0) || v > 1e6) usage(std::string(flag) + ": expected seconds >= 0 (0: off)");
    return Sourced<std::chrono::milliseconds>{std::chrono::milliseconds(static_cast<long long>(v * 1000.0)),
                                              s.at(key).source};
  };
  // "auto": derived from the workers' step intervals (agent/heartbeat_estimator.h).
  const auto& hb = s.at("heartbeat_timeout");
  plan.heartbeat_auto = {trim(hb.value) == "auto", hb.source};
  if (plan.heartbeat_auto.value) {
    plan.heartbeat_timeout = {std::chrono::milliseconds(0), hb.source};
  } else {
    const auto v = parse_double_text(hb.value);
    if (!v || !(*v >= 0) || *v > 1e6) {
      usage("--heartbeat-timeout: expected seconds >= 0 (0: off) or auto, got '" + hb.value + "'" +
            (hb.source.rfind("--", 0) == 0 ? "" : " (from " + hb.source + ")"));
    }
    plan.heartbeat_timeout = {std::chrono::milliseconds(static_cast<long long>(*v * 1000.0)), hb.source};
  }
  plan.initial_heartbeat_timeout = seconds("initial_heartbeat_timeout", "--initial-heartbeat-timeout");
  plan.max_no_progress_restarts = {int_setting(s, "max_no_progress_restarts", "--max-no-progress-restarts"),
                                   s.at("max_no_progress_restarts").source};
  if (plan.max_no_progress_restarts.value < 0) usage("--max-no-progress-restarts: must be >= 0");
  if (env.get("TORCHELASTIC_ENABLE_FILE_TIMER") == std::optional<std::string>("1")) {
    const auto path = env.get("TORCHELASTIC_TIMER_FILE");
    plan.file_timer = {path.value_or(""), path ? "TORCHELASTIC_TIMER_FILE" : "TORCHELASTIC_ENABLE_FILE_TIMER"};
  } else {
    plan.file_timer = {std::nullopt, "default"};
  }
}

// Whether a program file runs by itself: an ELF binary, or a script with a #! line. Anything
// else (a Python file without the .py suffix, say) is Python's to run.
bool runs_by_itself(const std::string& path) {
  char head[4] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  return (n >= 4 && head[0] == 0x7f && head[1] == 'E' && head[2] == 'L' && head[3] == 'F') ||
         (n >= 2 && head[0] == '#' && head[1] == '!');
}

bool is_executable_file(const std::string& path) { return is_regular_file(path) && ::access(path.c_str(), X_OK) == 0; }

void plan_program(std::vector<std::string> program, const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan) {
  // PATH as crun was given it (set but empty: the current directory, as execvp), else the default.
  const auto path_var = env.vars.find("PATH");
  const bool has_path = path_var != env.vars.end();
  const std::string search_path = has_path ? path_var->second : kDefaultSearchPath;
  const std::string lookup_source = has_path ? "PATH" : "default PATH " + std::string(kDefaultSearchPath);
  const bool module = s.at("module").value == "1";
  const bool no_python = s.at("no_python").value == "1";
  if (module && no_python) usage("--no-python and --module cannot be used together");
  auto& argv = plan.worker_argv;
  // The program (docs: README, "Which programs run how"): a file by that name here, as torchrun's
  // training script is a path, else a $PATH lookup for a bare name. It runs by itself with
  // --no-python, or when it is an ELF binary or a #! script; a .py file, a module, or any other
  // file runs under Python. Its argv[0] stays as written.
  const std::string& name = program.front();
  const bool here = !module && is_regular_file(name);
  if (!module && (no_python || !name.ends_with(".py"))) {
    std::optional<std::string> exe;
    if (here) {
      if (no_python || runs_by_itself(name)) {
        if (!is_executable_file(name)) usage("program not executable: " + name + " (chmod +x it)");
        exe = name;
      }
    } else {
      exe = resolve_executable(name, search_path);
      if (!exe && no_python) usage("program not found or not executable: " + name);
    }
    if (exe) {
      plan.worker_program = {*exe, here || name.find('/') != std::string::npos ? "command line" : lookup_source};
      argv = {std::move(program), no_python ? s.at("no_python").source : "command line"};
      return;
    }
  }
  const auto py_env = env.get("PYTHON_EXEC");
  const std::string py = py_env.value_or("python3");
  const auto exe = resolve_executable(py, search_path);
  if (!exe) usage("Python interpreter not found: " + py + " (set PYTHON_EXEC or use --no-python)");
  plan.worker_program = {*exe, py.find('/') != std::string::npos ? "PYTHON_EXEC" : lookup_source};
  // argv[0]: $PYTHON_EXEC as written, as torchrun's; without it torchrun's is its own interpreter's
  // absolute path, crun's the python3 it found.
  plan.runs_python = true;
  argv.value = {py_env ? *py_env : *exe, "-u"};
  argv.source = py_env ? "PYTHON_EXEC" : "command line";
  if (module) {
    argv.value.push_back("-m");
  } else if (!here) {
    usage("program not found: " + name);
  }
  argv.value.insert(argv.value.end(), program.begin(), program.end());
}

}  // namespace crun
