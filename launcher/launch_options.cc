#include "launcher/launch_options.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cctype>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "agent/signal_names.h"
#include "agent/worker_process.h"
#include "launcher/multi_node_options.h"

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

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

LaunchOptions parse_launch_options(int argc, char** argv) {
  CLI::App app{"crun: launch a distributed training job (torchrun-compatible)", "crun"};
  app.prefix_command();
  app.set_help_flag("-h,--help", "print this help and exit");
  app.footer(
      "Usage: crun [options] program [args...]   (a .py program runs as `python3 -u`, PYTHON_EXEC\n"
      "overrides the interpreter; -m runs a module; --no-python execs the program)\n"
      "Exit status: 0 all workers succeeded; the root-cause worker's code (128+N for signal N)\n"
      "when restarts are exhausted; 128+N when crun got signal N; 2 bad usage; 3 agent error.");

  std::string nnodes = "1:1";
  std::string nproc = "1";
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.1;
  std::string start_method = "spawn";
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string local_addr;
  std::string logs_specs;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  double stop_timeout = 30.0;
  bool version = false;

  app.add_option("--nnodes", nnodes, "number of nodes, N or MIN:MAX")->envname("PET_NNODES");
  app.add_option("--nproc-per-node,--nproc_per_node", nproc, "workers per node: N, cpu, gpu or auto")
      ->envname("PET_NPROC_PER_NODE");
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend)->envname("PET_RDZV_BACKEND");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint)->envname("PET_RDZV_ENDPOINT");
  app.add_option("--rdzv-id,--rdzv_id", rdzv_id)->envname("PET_RDZV_ID");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf)->envname("PET_RDZV_CONF");
  app.add_flag("--standalone", standalone, "single node, embedded store on a free loopback port")
      ->envname("PET_STANDALONE");
  app.add_option("--max-restarts,--max_restarts", max_restarts)->envname("PET_MAX_RESTARTS");
  app.add_option("--monitor-interval,--monitor_interval", monitor_interval,
                 "accepted for compatibility (crun reacts to events)")
      ->envname("PET_MONITOR_INTERVAL");
  app.add_option("--start-method,--start_method", start_method, "accepted for compatibility")
      ->envname("PET_START_METHOD");
  app.add_option("--role", role)->envname("PET_ROLE");
  app.add_flag("-m,--module", module, "run the program as a Python module")->envname("PET_MODULE");
  app.add_flag("--no-python,--no_python", no_python, "exec the program directly")
      ->envname("PET_NO_PYTHON");
  app.add_flag("--run-path,--run_path", run_path)->envname("PET_RUN_PATH");
  app.add_option("--log-dir,--log_dir", log_dir)->envname("PET_LOG_DIR");
  app.add_option("-r,--redirects", redirects)->envname("PET_REDIRECTS");
  app.add_option("-t,--tee", tee)->envname("PET_TEE");
  app.add_option("--local-ranks-filter,--local_ranks_filter", local_ranks_filter)
      ->envname("PET_LOCAL_RANKS_FILTER");
  auto* node_rank_opt = app.add_option("--node-rank,--node_rank", node_rank)->envname("PET_NODE_RANK");
  auto* master_addr_opt = app.add_option("--master-addr,--master_addr", master_addr)->envname("PET_MASTER_ADDR");
  auto* master_port_opt =
      app.add_option("--master-port,--master_port", master_port)->envname("PET_MASTER_PORT");
  app.add_option("--local-addr,--local_addr", local_addr)->envname("PET_LOCAL_ADDR");
  app.add_option("--logs-specs,--logs_specs", logs_specs)->envname("PET_LOGS_SPECS");
  app.add_option("--signals-to-handle,--signals_to_handle", signals_to_handle,
                 "signals forwarded to the workers (SIGTERM,SIGINT,SIGHUP,SIGQUIT always are)")
      ->envname("PET_SIGNALS_TO_HANDLE");
  app.add_option("--stop-timeout,--stop_timeout", stop_timeout,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 30)");
  app.add_flag("--version", version, "print crun's version and exit");

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

  std::vector<std::string> program = app.remaining();
  if (!program.empty() && program.front() == "--") program.erase(program.begin());
  if (program.empty()) usage("missing the program to run: crun [options] program [args...]");
  if (program.front().size() > 1 && program.front()[0] == '-') {
    usage("unknown option " + program.front());
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
  if (master_port_opt->count() > 0 && (master_port < 0 || master_port > 65535)) {
    usage("--master-port: expected 0-65535, got " + std::to_string(master_port));
  }
  if (role.empty()) usage("--role: must not be empty");
  if (module && no_python) usage("--no-python and --module cannot be used together");

  RendezvousFlags rf;
  rf.standalone = standalone;
  rf.min_nodes = min_nodes;
  rf.max_nodes = max_nodes;
  rf.backend = rdzv_backend;
  rf.endpoint = trim(rdzv_endpoint);
  rf.run_id = rdzv_id;
  rf.conf = rdzv_conf;
  if (node_rank_opt->count() > 0) rf.node_rank = node_rank;
  if (master_addr_opt->count() > 0) rf.master_addr = master_addr;
  if (master_port_opt->count() > 0) rf.master_port = master_port;
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
  if (master_port_opt->count() > 0 && master_port > 0 && !(c.multi_node && rdzv_backend == "static")) {
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
  // SIGTERM, SIGINT, SIGHUP and SIGQUIT are always handled; --signals-to-handle adds more.
  std::set<int> seen{SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  c.handled_signals = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
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
  (void)min_nodes;
  return out;
}

}  // namespace crun
