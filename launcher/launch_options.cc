#include "launcher/launch_options.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cctype>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "agent/signal_names.h"
#include "agent/worker_process.h"
#include "launcher/job_environment.h"
#include "launcher/multi_node_options.h"
#include "launcher/option_values.h"
#include "launcher/slurm_tasks.h"

#ifndef CRUN_VERSION
#define CRUN_VERSION "0.0.0"
#endif

namespace crun {
namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::optional<long> to_long(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(t.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

int count_gpus() {
  int n = 0;
  if (DIR* d = ::opendir("/dev")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
          std::all_of(name.begin() + 6, name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        ++n;
      }
    }
    ::closedir(d);
  }
  return n;
}

int parse_nproc(const std::string& text) {
  const int cpus = std::max(1u, std::thread::hardware_concurrency());
  if (text == "cpu") return cpus;
  if (text == "gpu") {
    const int gpus = count_gpus();
    if (gpus == 0) usage("--nproc-per-node gpu: no GPU found on this node");
    return gpus;
  }
  if (text == "auto") {
    const int gpus = count_gpus();
    return gpus > 0 ? gpus : cpus;
  }
  const auto v = to_long(text);
  if (!v || *v < 1 || *v > 65536) {
    usage("--nproc-per-node: expected a positive integer, cpu, gpu or auto, got '" + text + "'");
  }
  return static_cast<int>(*v);
}

// "N" or "MIN:MAX" -> (min, max)
std::pair<long, long> parse_nnodes(const std::string& text) {
  const auto parts = split(text, ':');
  const auto lo = to_long(parts[0]);
  const auto hi = parts.size() == 2 ? to_long(parts[1]) : lo;
  if (parts.size() > 2 || !lo || !hi || *lo < 1 || *hi < *lo) {
    usage("--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got '" + text + "'");
  }
  return {*lo, *hi};
}

// torchrun's Std spec: "0".."3" for every rank, or "0:1,1:2" per local rank.
std::vector<unsigned> parse_std(const std::string& flag, const std::string& text, int nproc) {
  std::vector<unsigned> out(static_cast<std::size_t>(nproc), 0u);
  const std::string t = trim(text);
  if (t.empty()) return out;
  auto std_value = [&](const std::string& v) {
    const auto n = to_long(v);
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
    const auto rank = to_long(kv[0]);
    if (!rank || *rank < 0) usage(flag + ": bad local rank in '" + text + "'");
    const unsigned v = std_value(kv[1]);
    if (*rank < nproc) out[static_cast<std::size_t>(*rank)] = v;
  }
  return out;
}

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> hex(0, 15);
  std::string id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id.push_back('-');
    id.push_back("0123456789abcdef"[hex(rd)]);
  }
  return id;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A PET_* variable of an on/off flag; set but empty means off.
bool bool_text(const std::string& name, const std::string& text) {
  if (trim(text).empty()) return false;
  if (auto b = parse_bool(text)) return *b;
  usage(name + ": expected true or false, got '" + text + "'");
}

// One launch setting as the user sees it: torchrun's flag, its PET_* variable, the default.
struct SettingSpec {
  const char* key;    // torchrun's name with '_': also JobEnvironment's key
  const char* flags;  // CLI11 names
  const char* help;
  std::string fallback;
  bool is_flag = false;
};

std::string pet_name(const std::string& key) {
  std::string pet = "PET_";
  for (char c : key) pet.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return pet;
}

}  // namespace

LaunchOptions parse_launch_options(int argc, char** argv) {
  CLI::App app{"crun: launch a distributed training job (torchrun-compatible)", "crun"};
  app.prefix_command();
  app.set_help_flag("-h,--help", "print this help and exit");
  app.footer(
      "Usage: crun [options] program [args...]   (a .py program runs as `python3 -u`, PYTHON_EXEC\n"
      "overrides the interpreter; -m runs a module; --no-python execs the program)\n"
      "Every option defaults from PET_<NAME> (PET_NNODES, ...). Under Slurm (srun crun ...) and on\n"
      "platforms that set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE per node, the job's shape comes from\n"
      "those variables. Precedence: flags > PET_* > Slurm/platform variables > defaults\n"
      "(--print-config shows each value and its source).\n"
      "Exit status: 0 all workers succeeded; the root-cause worker's code (128+N for signal N)\n"
      "when restarts are exhausted; 128+N when crun got signal N (SIGUSR1: preempted, 138); 2 bad\n"
      "usage; 3 agent error; 4 rendezvous timeout; 5 rendezvous closed; 6 rejected; 7 store lost.");

  const std::vector<SettingSpec> specs = {
      {"nnodes", "--nnodes", "number of nodes, N or MIN:MAX", "1:1"},
      {"nproc_per_node", "--nproc-per-node,--nproc_per_node", "workers per node: N, cpu, gpu or auto", "1"},
      {"rdzv_backend", "--rdzv-backend,--rdzv_backend", "c10d or static", "static"},
      {"rdzv_endpoint", "--rdzv-endpoint,--rdzv_endpoint", "HOST[:PORT] of the rendezvous store", ""},
      {"rdzv_id", "--rdzv-id,--rdzv_id", "the job's run id", "none"},
      {"rdzv_conf", "--rdzv-conf,--rdzv_conf", "KEY=VALUE,... rendezvous settings", ""},
      {"standalone", "--standalone", "single node, embedded store on a free loopback port", "0", true},
      {"max_restarts", "--max-restarts,--max_restarts", "restarts of the whole group before giving up", "0"},
      {"monitor_interval", "--monitor-interval,--monitor_interval", "accepted for compatibility (crun reacts to events)", "0.1"},
      {"start_method", "--start-method,--start_method", "accepted for compatibility", "spawn"},
      {"role", "--role", "the workers' role name", "default"},
      {"module", "-m,--module", "run the program as a Python module", "0", true},
      {"no_python", "--no-python,--no_python", "exec the program directly", "0", true},
      {"run_path", "--run-path,--run_path", "accepted for compatibility", "0", true},
      {"log_dir", "--log-dir,--log_dir", "where attempt logs and error files go", ""},
      {"redirects", "-r,--redirects", "streams to files only: 0-3 or LOCAL_RANK:0-3,...", "0"},
      {"tee", "-t,--tee", "streams to files and console: 0-3 or LOCAL_RANK:0-3,...", "0"},
      {"local_ranks_filter", "--local-ranks-filter,--local_ranks_filter", "local ranks shown on the console", ""},
      {"node_rank", "--node-rank,--node_rank", "this node's rank (static), or a rank hint (c10d)", "0"},
      {"master_addr", "--master-addr,--master_addr", "static: the store's host", "127.0.0.1"},
      {"master_port", "--master-port,--master_port", "static: the store's port", "29500"},
      {"local_addr", "--local-addr,--local_addr", "the address other nodes reach this one at", ""},
      {"logs_specs", "--logs-specs,--logs_specs", "accepted for compatibility", ""},
      {"signals_to_handle", "--signals-to-handle,--signals_to_handle",
       "signals forwarded to the workers (SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2 always are)",
       "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
      {"stop_timeout", "--stop-timeout,--stop_timeout", "seconds between the stop signal and SIGKILL (default 30)", "30"},
  };
  std::map<std::string, std::string> raw;
  std::map<std::string, bool> raw_flag;
  std::map<std::string, CLI::Option*> opts;
  for (const auto& spec : specs) {
    if (spec.is_flag) {
      opts[spec.key] = app.add_flag(spec.flags, raw_flag[spec.key], spec.help);
    } else {
      opts[spec.key] = app.add_option(spec.flags, raw[spec.key], spec.help);
    }
  }
  bool version = false;
  bool print_config = false;
  bool slurm_tasks = false;
  app.add_flag("--version", version, "print crun's version and exit");
  app.add_flag("--print-config,--print_config", print_config,
               "print every launch setting and where it came from, then exit");
  app.add_flag("--slurm-tasks,--slurm_tasks", slurm_tasks,
               "one Slurm task per worker (srun -n N crun --slurm-tasks prog): exec the program with "
               "its rank from SLURM_PROCID; no agent");

  LaunchOptions out;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.exit_now = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (auto& c : msg) {
      if (c == '\n') c = ' ';
    }
    usage(trim(msg));
  }
  if (version) {
    out.exit_now = std::string("crun ") + CRUN_VERSION + "\n";
    return out;
  }

  // Each setting: the flag, else PET_*, else what Slurm or the platform says, else the default.
  JobEnvironment job;
  if (!slurm_tasks) {
    try {
      job = detect_job_environment();
    } catch (const std::invalid_argument& e) {
      usage(e.what());
    }
  }
  std::map<std::string, SourcedValue> setting;
  std::set<std::string> from_job;  // settings whose value came from Slurm or the platform
  auto resolve = [&](const SettingSpec& spec, bool use_job) {
    const std::string key = spec.key;
    SourcedValue v{spec.fallback, "default"};
    if (opts[key]->count() > 0) {
      const auto names = split(spec.flags, ',');
      v = {spec.is_flag ? "1" : raw[key], names.size() > 1 && names[0].rfind("--", 0) != 0 ? names[1] : names[0]};
    } else if (auto pet = env_value(pet_name(key).c_str())) {
      v = {*pet, pet_name(key)};
      if (spec.is_flag) v.value = bool_text(pet_name(key), *pet) ? "1" : "0";
    } else if (auto it = job.defaults.find(key); use_job && it != job.defaults.end()) {
      v = it->second;
      from_job.insert(key);
    }
    setting[key] = v;
  };
  for (const auto& spec : specs) {
    if (std::string(spec.key) == "standalone") resolve(spec, true);
  }
  // --standalone describes the job's shape itself: the scheduler's or platform's shape is not used.
  const bool standalone_asked = setting.at("standalone").value == "1";
  if (standalone_asked) job.note.clear();
  for (const auto& spec : specs) {
    static const std::set<std::string> shape = {"nnodes", "rdzv_backend", "rdzv_endpoint", "node_rank", "master_addr", "master_port"};
    if (std::string(spec.key) != "standalone") resolve(spec, !(standalone_asked && shape.count(spec.key)));
  }
  auto value = [&](const char* key) -> const std::string& { return setting.at(key).value; };
  auto given = [&](const char* key) { return setting.at(key).source != "default"; };
  auto int_value = [&](const char* key, const std::string& flag) {
    const auto v = to_long(value(key));
    if (!v || *v < INT32_MIN || *v > INT32_MAX) {
      usage(flag + ": expected an integer, got '" + value(key) + "' (from " + setting.at(key).source + ")");
    }
    return static_cast<int>(*v);
  };
  auto double_value = [&](const char* key, const std::string& flag) {
    const std::string t = trim(value(key));
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size()) {
      usage(flag + ": expected a number, got '" + value(key) + "' (from " + setting.at(key).source + ")");
    }
    return d;
  };

  std::vector<std::string> program = app.remaining();
  if (!program.empty() && program.front() == "--") program.erase(program.begin());
  if (program.empty()) usage("missing the program to run: crun [options] program [args...]");
  if (program.front().size() > 1 && program.front()[0] == '-') {
    usage("unknown option " + program.front());
  }

  const std::string nnodes = value("nnodes");
  const std::string nproc = value("nproc_per_node");
  const std::string rdzv_backend = value("rdzv_backend");
  std::string rdzv_endpoint = value("rdzv_endpoint");
  const std::string rdzv_id = value("rdzv_id");
  const std::string rdzv_conf = value("rdzv_conf");
  const bool standalone = value("standalone") == "1";
  const int max_restarts = int_value("max_restarts", "--max-restarts");
  const double monitor_interval = double_value("monitor_interval", "--monitor-interval");
  const std::string start_method = value("start_method");
  const std::string role = value("role");
  const bool module = value("module") == "1";
  const bool no_python = value("no_python") == "1";
  const std::string log_dir = value("log_dir");
  const std::string redirects = value("redirects");
  const std::string tee = value("tee");
  const std::string local_ranks_filter = value("local_ranks_filter");
  const int node_rank = int_value("node_rank", "--node-rank");
  const std::string master_addr = value("master_addr");
  const int master_port = int_value("master_port", "--master-port");
  const std::string local_addr = value("local_addr");
  const std::string signals_to_handle = value("signals_to_handle");
  const double stop_timeout = double_value("stop_timeout", "--stop-timeout");

  if (slurm_tasks) {
    for (const char* key : {"nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "standalone", "max_restarts", "node_rank"}) {
      if (given(key)) usage("--slurm-tasks: " + setting.at(key).source + " does not apply (srun starts every worker; there is no agent)");
    }
  }

  // Values.
  const auto [min_nodes, max_nodes] = parse_nnodes(nnodes);
  if (rdzv_backend != "static" && rdzv_backend != "c10d" && rdzv_backend != "etcd" &&
      rdzv_backend != "etcd-v2") {
    usage("--rdzv-backend: expected static, c10d, etcd or etcd-v2, got '" + rdzv_backend + "'");
  }
  for (const auto& item : split(rdzv_conf, ',')) {
    if (!trim(item).empty() && item.find('=') == std::string::npos) {
      usage("--rdzv-conf: expected KEY=VALUE,..., got '" + rdzv_conf + "'");
    }
  }
  if (!rdzv_endpoint.empty() && (rdzv_endpoint.front() == ':' || trim(rdzv_endpoint).empty())) {
    usage("--rdzv-endpoint: expected HOST[:PORT], got '" + rdzv_endpoint + "'");
  }
  const int nproc_value = parse_nproc(nproc);
  if (max_restarts < 0) usage("--max-restarts: must be >= 0, got " + std::to_string(max_restarts));
  if (monitor_interval < 0) usage("--monitor-interval: must be >= 0");
  if (start_method != "spawn" && start_method != "fork" && start_method != "forkserver") {
    usage("--start-method: expected spawn, fork or forkserver, got '" + start_method + "'");
  }
  if (!(stop_timeout >= 0) || stop_timeout > 1e6) usage("--stop-timeout: expected seconds >= 0");
  if (given("master_port") && (master_port < 0 || master_port > 65535)) {
    usage("--master-port: expected 0-65535, got " + std::to_string(master_port));
  }
  if (role.empty()) usage("--role: must not be empty");
  if (module && no_python) usage("--no-python and --module cannot be used together");

  // Slurm names the rendezvous host by its node name; reach it by an address Slurm knows.
  std::optional<bool> slurm_host;
  if (job.kind == "slurm" && from_job.count("rdzv_endpoint") && !job.first_node.empty()) {
    try {
      const std::string addr = resolve_slurm_node(job.first_node);
      if (addr != job.first_node) {
        rdzv_endpoint = addr + rdzv_endpoint.substr(job.first_node.size());
        setting["rdzv_endpoint"].source += ", " + job.first_node + "'s NodeAddr from scontrol";
        setting["rdzv_endpoint"].value = rdzv_endpoint;
      }
    } catch (const std::runtime_error& e) {
      usage(e.what());
    }
    if (from_job.count("node_rank")) slurm_host = node_rank == 0;
  }

  RendezvousFlags rf;
  rf.standalone = standalone;
  rf.min_nodes = min_nodes;
  rf.max_nodes = max_nodes;
  rf.backend = rdzv_backend;
  rf.endpoint = trim(rdzv_endpoint);
  rf.run_id = rdzv_id;
  rf.conf = rdzv_conf;
  // A node rank from Slurm or the platform describes their multi-node job; when flags or PET_*
  // make the run single-node, it does not apply.
  if (given("node_rank") && !(from_job.count("node_rank") && max_nodes == 1)) rf.node_rank = node_rank;
  if (given("master_addr")) rf.master_addr = master_addr;
  if (given("master_port")) rf.master_port = master_port;
  rf.is_host = slurm_host;
  rf.local_addr = local_addr;
  rf.program = program;

  AgentConfig& c = out.agent;
  c.multi_node = make_multi_node(rf, max_restarts);
  c.nproc_per_node = nproc_value;
  c.max_restarts = max_restarts;
  c.stop_timeout = std::chrono::milliseconds(static_cast<long long>(stop_timeout * 1000.0));
  c.role = role;
  c.run_id = (standalone && rdzv_id == "none") ? random_run_id() : rdzv_id;
  c.master_addr = master_addr.empty() ? "127.0.0.1" : master_addr;
  if (given("master_port") && master_port > 0 && !(c.multi_node && rdzv_backend == "static")) {
    c.master_port = static_cast<std::uint16_t>(master_port);
  }
  c.redirects = parse_std("--redirects", redirects, nproc_value);
  c.tee = parse_std("--tee", tee, nproc_value);
  c.console.assign(static_cast<std::size_t>(nproc_value), true);
  if (!trim(local_ranks_filter).empty()) {
    c.console.assign(static_cast<std::size_t>(nproc_value), false);
    for (const auto& item : split(local_ranks_filter, ',')) {
      const auto r = to_long(item);
      if (!r || *r < 0) usage("--local-ranks-filter: expected comma-separated local ranks, got '" + local_ranks_filter + "'");
      if (*r < nproc_value) c.console[static_cast<std::size_t>(*r)] = true;
    }
  }
  c.log_dir = log_dir;
  // SIGTERM, SIGINT, SIGHUP and SIGQUIT (torchrun's four) and SIGUSR1/SIGUSR2 (Slurm's
  // preemption notices: `--signal=USR1@60`) are always handled; --signals-to-handle adds more.
  std::set<int> seen{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  c.handled_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (const auto& name : split(signals_to_handle, ',')) {
    if (trim(name).empty()) continue;
    const auto s = signal_number(trim(name));
    if (!s || *s == SIGKILL || *s == SIGSTOP || *s == SIGCHLD) {
      usage("--signals-to-handle: cannot handle '" + trim(name) + "'");
    }
    if (seen.insert(*s).second) c.handled_signals.push_back(*s);
  }
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
  c.hostname = host;

  // The program.
  // A .py script (or a module) runs under Python; any other executable runs as it is, like
  // `--no-python` (torchrun would hand a native binary to Python and fail).
  const bool python_script = module || program.front().ends_with(".py") || !resolve_executable(program.front());
  if (no_python || !python_script) {
    const auto exe = resolve_executable(program.front());
    if (!exe) usage("program not found or not executable: " + program.front());
    program.front() = *exe;
    c.worker_argv = std::move(program);
  } else {
    const char* py_env = std::getenv("PYTHON_EXEC");
    const std::string py = (py_env != nullptr && *py_env != '\0') ? py_env : "python3";
    const auto exe = resolve_executable(py);
    if (!exe) usage("Python interpreter not found: " + py + " (set PYTHON_EXEC or use --no-python)");
    c.worker_argv = {*exe, "-u"};
    if (module) {
      c.worker_argv.push_back("-m");
    } else if (!is_regular_file(program.front())) {
      usage("program not found: " + program.front());
    }
    c.worker_argv.insert(c.worker_argv.end(), program.begin(), program.end());
  }
  out.standalone = standalone;
  out.slurm_tasks = slurm_tasks;
  if (slurm_tasks) {
    try {
      out.task_env = slurm_task_environment(given("master_addr") ? std::optional<std::string>(master_addr) : std::nullopt,
                                            given("master_port") ? std::optional<int>(master_port) : std::nullopt, role);
    } catch (const std::invalid_argument& e) {
      usage(e.what());
    }
  }
  out.note = job.note;
  if (print_config) {
    std::string text;
    auto line = [&](const std::string& name, const std::string& v, const std::string& source) {
      text += name + " = " + v + "  (" + source + ")\n";
    };
    line("mode", slurm_tasks ? "slurm-tasks" : c.multi_node ? "multi-node" : "single-node",
         slurm_tasks ? "--slurm-tasks" : job.kind.empty() ? "flags" : job.kind + " environment");
    for (const auto& spec : specs) {
      const auto& v = setting.at(spec.key);
      line(spec.key, v.value, v.source);
    }
    if (c.multi_node) {
      const auto& m = *c.multi_node;
      line("store_endpoint", m.endpoint_host + ":" + std::to_string(m.endpoint_port),
           rdzv_backend == "static" ? "master_addr:master_port" : "rdzv_endpoint");
      line("store_host", m.is_host ? (*m.is_host ? "this node" : "another node") : "this node if the endpoint is one of its addresses",
           slurm_host ? "SLURM_NODEID" : m.is_host ? "rdzv_conf/node_rank" : "address match");
    }
    line("run_id", c.run_id, c.run_id == rdzv_id ? setting.at("rdzv_id").source : "fresh (standalone)");
    line("program", join_words(c.worker_argv), "command line");
    for (const auto& [k, v] : out.task_env) line("task " + k, v, "Slurm task");
    out.exit_now = text;
  }
  (void)min_nodes;
  return out;
}

}  // namespace crun
