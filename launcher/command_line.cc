#include "launcher/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

#include "base/exit_codes.h"
#include "launcher/option_values.h"

#ifndef CRUN_VERSION
#define CRUN_VERSION "0.0.0"
#endif

namespace crun {

const std::vector<SettingSpec>& launch_settings() {
  static const std::vector<SettingSpec> specs = {
      {"nnodes", "--nnodes", "number of nodes, N or MIN:MAX", "1:1"},
      {"nproc_per_node", "--nproc-per-node,--nproc_per_node", "workers per node: N, cpu, gpu or auto", "1"},
      {"rdzv_backend", "--rdzv-backend,--rdzv_backend", "c10d, etcd-v3 or static", "static"},
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
      {"logs_specs", "--logs-specs,--logs_specs", "accepted for compatibility", "", false, "", false},
      {"signals_to_handle", "--signals-to-handle,--signals_to_handle",
       "signals forwarded to the workers (SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2 always are)",
       "SIGTERM,SIGINT,SIGHUP,SIGQUIT"},
      {"stop_timeout", "--stop-timeout,--stop_timeout,--shutdown-timeout,--shutdown_timeout",
       "seconds between the stop signal and SIGKILL (torch's --shutdown-timeout; the last given wins)", "30", false,
       "PET_SHUTDOWN_TIMEOUT,TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
      {"virtual_local_rank", "--virtual-local-rank,--virtual_local_rank",
       "every worker's LOCAL_RANK is 0, its CUDA_VISIBLE_DEVICES its local rank's device", "0", true},
      {"event_log_handler", "--event-log-handler,--event_log_handler",
       "the agent's events: null, console, dynamic_rendezvous (rendezvous events on the console) or jsonl:PATH", "null"},
      {"health_check_port", "--health-check-port,--health_check_port",
       "serve /healthz, /metrics, /status and a status page on this port (0: any free one; unset: off)", "", false,
       "TORCHELASTIC_HEALTH_CHECK_PORT"},
      {"health_check_addr", "--health-check-addr,--health_check_addr", "the address the health check listens on",
       "127.0.0.1"},
      {"duplicate_stdout_filters", "--duplicate-stdout-filters,--duplicate_stdout_filters",
       "not implemented yet: only an empty list is accepted", ""},
      {"duplicate_stderr_filters", "--duplicate-stderr-filters,--duplicate_stderr_filters",
       "not implemented yet: only an empty list is accepted", ""},
      {"numa_binding", "--numa-binding,--numa_binding", "bind local rank i to CPUs near GPU i: node, socket, exclusive or core-complex", "",
       false, "", false},
      {"heartbeat_timeout", "--heartbeat-timeout,--heartbeat_timeout",
       "seconds a worker may go without a heartbeat before it counts as hung (0: off; auto: from its step intervals)", "0"},
      {"initial_heartbeat_timeout", "--initial-heartbeat-timeout,--initial_heartbeat_timeout",
       "seconds from a worker's start to its first heartbeat (0: off)", "0"},
      {"max_no_progress_restarts", "--max-no-progress-restarts,--max_no_progress_restarts",
       "with heartbeats: exit 8 after this many restarts in a row that did not raise the highest step (0: never)", "3"},
      {"standby_workers", "--standby-workers,--standby_workers",
       "keep a spare Python interpreter per local rank, --standby-preload imported, for the next start", "0", true},
      {"standby_preload", "--standby-preload,--standby_preload", "modules a standby imports while it waits, comma-separated",
       "torch"},
      {"state_max_bytes", "--state-max-bytes,--state_max_bytes",
       "each rank's committed bytes in its CRUN_STATE_DIR (256MiB, 1GiB, bytes); a save over it is refused", "1GiB"},
      {"state_persist_dir", "--state-persist-dir,--state_persist_dir",
       "also copy each rank's committed CRUN_STATE_DIR files to DIR/rank-<rank>/ in the background (\"\": off)", ""},
      {"exclude_after", "--exclude-after,--exclude_after",
       "multi-node: exclude a node once it was the root cause of this many restarts (0: never)", "2"},
      {"exclude_cooldown", "--exclude-cooldown,--exclude_cooldown",
       "seconds an excluded node stays out; doubled at each further exclusion of it", "600"},
      {"node_check", "--node-check,--node_check",
       "a node check: a program and its arguments (split as a shell would; no shell), run before each round; exit 0: healthy "
       "(repeatable)", "", false, "", true, true},
      {"no_node_check", "--no-node-check,--no_node_check", "turn a built-in node check off: disk, net or gpu (repeatable)", "",
       false, "", true, true},
      {"node_check_timeout", "--node-check-timeout,--node_check_timeout",
       "seconds one node check may take (and the gpu check waits for memory to be freed)", "30"},
      {"node_check_interval", "--node-check-interval,--node_check_interval",
       "seconds between an unhealthy node check and the next try", "10"},
      {"node_check_path", "--node-check-path,--node_check_path",
       "a directory the disk check also checks (repeatable)", "", false, "", true, true},
      {"node_check_min_free", "--node-check-min-free,--node_check_min_free",
       "free space the disk check wants in each directory (100M, 1G, bytes)", "16M"},
      {"precheck", "--precheck",
       "before the first start, time a short compute and all_reduce on every node; a slow node is excluded", "0", true},
      {"precheck_slowdown", "--precheck-slowdown,--precheck_slowdown",
       "with --precheck: a node slower than this many times the nodes' median is slow (> 1)", "2.0"},
      {"collapse_logs", "--collapse-logs,--collapse_logs",
       "console: a line several of this node's local ranks print within --collapse-window is shown once, "
       "prefixed with their ranks ([default0-7]:); per node only; log files unchanged", "0", true},
      {"collapse_window", "--collapse-window,--collapse_window",
       "with --collapse-logs: seconds a line waits for the other local ranks to print it (> 0, at most 60)", "0.2"},
      {"pg_timeout", "--pg-timeout,--pg_timeout",
       "seconds: torch's process-group timeout the workers pass to init_process_group (exported as CRUN_PG_TIMEOUT_SEC); "
       "crun's timeouts are checked to fire before it (unset: torch's 10 min)", "", false, "CRUN_PG_TIMEOUT_SEC"},
      {"capture_timeout", "--capture-timeout,--capture_timeout",
       "seconds to take every local worker's stacks before crun stops a failed or hung group (0: off)", "5"},
      {"no_python_stacks", "--no-python-stacks,--no_python_stacks",
       "Python workers' stacks before a kill are native only (no faulthandler registered in them)", "0", true},
  };
  return specs;
}

std::string pet_name(const std::string& key) {
  std::string pet = "PET_";
  for (char c : key) pet.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return pet;
}

namespace {

// The name a setting's source shows: its first long spelling ("-r,--redirects" -> "--redirects").
std::string flag_name(const SettingSpec& spec) {
  const auto names = split(spec.flags, ',');
  return names.size() > 1 && names[0].rfind("--", 0) != 0 ? names[1] : names[0];
}

// What a spelling on the command line names: its setting (nullptr: one of crun's own on/off
// flags) and whether it takes a value.
struct Spelling {
  const SettingSpec* spec;
  bool takes_value;
};

// `name` among the settings' spellings and crun's own flags; nothing when it is none of them. A
// scan of the table (~100 spellings, no allocation): building a map of them cost each agent's
// start more than all the lookups it makes.
std::optional<Spelling> spelling(std::string_view name) {
  for (const auto& spec : launch_settings()) {
    std::string_view flags = spec.flags;
    while (!flags.empty()) {
      const std::size_t comma = flags.find(',');
      if (flags.substr(0, comma) == name) return Spelling{&spec, !spec.is_flag};
      flags = comma == std::string_view::npos ? std::string_view() : flags.substr(comma + 1);
    }
  }
  for (const char* own : {"-h", "--help", "--version", "--print-config", "--print_config", "--slurm-tasks", "--slurm_tasks"}) {
    if (name == own) return Spelling{nullptr, false};
  }
  return std::nullopt;
}

// The options before the program, read as argparse reads them, for CLI11 to parse: `--opt=`
// becomes `--opt ""` (an empty value; CLI11 would take the next word), and the source each given
// setting shows is the spelling written last, '_' as '-' ("--shutdown_timeout" ->
// "--shutdown-timeout"; a short one shows its long name). The scan stops at the program, at "--"
// and at anything it does not know (CLI11 then reports it, or reads a cluster of short flags:
// `-mr2`). `every_setting`: the scan stopped at such a word, or -h or --help came before it, so
// CLI11 must know every setting.
std::vector<std::string> argparse_words(const std::vector<std::string>& argv, std::map<std::string, std::string>& source,
                                        bool& every_setting) {
  std::vector<std::string> out(argv.begin(), argv.begin() + (argv.empty() ? 0 : 1));
  std::size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word.size() < 2 || word[0] != '-' || word == "--") break;
    const bool long_form = word.rfind("--", 0) == 0;
    const std::size_t eq = long_form ? word.find('=') : std::string::npos;
    const std::string name = long_form ? word.substr(0, eq) : word.substr(0, 2);
    const auto found = spelling(name);
    if (!found) {
      every_setting = true;
      break;
    }
    const auto [spec, takes_value] = *found;
    const bool attached = !long_form && word.size() > 2;  // -r3
    if (attached && !takes_value) {                       // a cluster of short flags
      every_setting = true;
      break;
    }
    if (name == "-h" || name == "--help") every_setting = true;
    if (spec != nullptr) {
      std::string shown = long_form ? name : flag_name(*spec);
      for (auto& c : shown) c = c == '_' ? '-' : c;
      source[spec->key] = shown;
    }
    if (takes_value && eq != std::string::npos && eq + 1 == word.size()) {
      out.push_back(name);
      out.emplace_back();
    } else {
      out.push_back(word);
      if (takes_value && eq == std::string::npos && !attached && i + 1 < argv.size()) out.push_back(argv[++i]);
    }
  }
  out.insert(out.end(), argv.begin() + static_cast<std::ptrdiff_t>(std::min(i, argv.size())), argv.end());
  return out;
}

// The exit codes' table (base/exit_codes.h), one code a line; README.md has each one's details.
std::string exit_status_help() {
  std::string text = "\nExit status (details: README.md, \"Exit status of `crun`\"):";
  for (const auto& row : kExitCodes) {
    text += "\n  " + std::string(row.code) + std::string(7 - row.code.size(), ' ') + std::string(row.summary);
  }
  return text;
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& argv) {
  CLI::App app{"crun: launch a distributed training job (torchrun-compatible)", "crun"};
  app.prefix_command();
  app.set_help_flag("-h,--help", "print this help and exit");
  app.footer(
      "Usage: crun [options] program [args...]   (a .py program runs as `python3 -u`, PYTHON_EXEC\n"
      "overrides the interpreter; -m runs a module; --no-python execs the program)\n"
      "Every option defaults from PET_<NAME> (PET_NNODES, ...). Under Slurm (srun crun ...) and on\n"
      "platforms that set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE per node, the job's shape comes from\n"
      "those variables. Precedence: flags > PET_* > Slurm/platform variables > defaults\n"
      "(--print-config shows each value and its source).\n" +
      exit_status_help());

  std::map<std::string, std::string> source;
  bool every_setting = false;
  const std::vector<std::string> words = argparse_words(argv, source, every_setting);

  // CLI11 parses the settings the scan found (all of them for the help, and for what the scan did
  // not read): registering each of the ~40 costs more than parsing, as CLI11 compares every new
  // option with those before it.
  std::map<std::string, std::string> text;
  std::map<std::string, bool> on;
  std::map<std::string, CLI::Option*> opts;
  for (const auto& spec : launch_settings()) {
    if (!every_setting && source.count(spec.key) == 0) continue;
    // A repeated option takes its last value, as argparse does.
    // A repeatable one keeps every value, one a line.
    opts[spec.key] = spec.is_flag ? app.add_flag(spec.flags, on[spec.key], spec.help)
                                  : app.add_option(spec.flags, text[spec.key], spec.help)
                                        ->multi_option_policy(spec.repeatable ? CLI::MultiOptionPolicy::Join
                                                                              : CLI::MultiOptionPolicy::TakeLast);
  }
  CommandLine out;
  bool version = false;
  app.add_flag("--version", version, "print crun's version and exit");
  app.add_flag("--print-config,--print_config", out.print_config,
               "print every launch setting and where it came from, then exit");
  app.add_flag("--slurm-tasks,--slurm_tasks", out.slurm_tasks,
               "one Slurm task per worker (srun -n N crun --slurm-tasks prog): exec the program with "
               "its rank from SLURM_PROCID; no agent");

  std::vector<const char*> args;
  for (const auto& a : words) args.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp&) {
    out.exit_now = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (auto& c : msg) {
      if (c == '\n') c = ' ';
    }
    throw LaunchUsageError(trim(msg));
  }
  if (version) {
    out.exit_now = std::string("crun ") + CRUN_VERSION + "\n";
    return out;
  }
  for (const auto& spec : launch_settings()) {
    const auto opt = opts.find(spec.key);
    if (opt == opts.end() || opt->second->count() == 0) continue;
    const auto shown = source.find(spec.key);
    out.given[spec.key] = {spec.is_flag ? "1" : text[spec.key], shown != source.end() ? shown->second : flag_name(spec)};
  }

  out.program = app.remaining();
  // "--" ends crun's options: what follows is the program, even a name that starts with '-'.
  const bool options_ended = !out.program.empty() && out.program.front() == "--";
  if (options_ended) out.program.erase(out.program.begin());
  if (out.program.empty()) throw LaunchUsageError("missing the program to run: crun [options] program [args...]");
  if (!options_ended && out.program.front().size() > 1 && out.program.front()[0] == '-') {
    throw LaunchUsageError("unknown option " + out.program.front());
  }
  return out;
}

}  // namespace crun
