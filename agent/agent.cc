#include "agent/agent.h"

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <map>
#include <optional>

#include "agent/agent_state_machine.h"
#include "agent/closing_stacks.h"
#include "agent/console_collapser.h"
#include "agent/console_sink.h"
#include "agent/control_file.h"
#include "agent/failure_report.h"
#include "agent/file_timer_server.h"
#include "agent/hang_watch.h"
#include "agent/heartbeat_estimator.h"
#include "agent/heartbeat_files.h"
#include "agent/http_endpoint.h"
#include "agent/line_router.h"
#include "agent/log_line_prefix.h"
#include "agent/node_checks.h"
#include "agent/operator_view.h"
#include "agent/gpu_memory.h"
#include "agent/precheck_run.h"
#include "agent/python_stacks.h"
#include "agent/flight_recorder.h"
#include "agent/root_cause_report.h"
#include "agent/run_directory.h"
#include "agent/signal_names.h"
#include "agent/stack_capture.h"
#include "agent/stack_text.h"
#include "agent/stack_groups.h"
#include "agent/standby_plan.h"
#include "agent/standby_pool.h"
#include "agent/state_directory.h"
#include "agent/state_persister.h"
#include "agent/state_replication.h"
#include "agent/worker_containment.h"
#include "agent/worker_env.h"
#include "agent/worker_group.h"
#include "agent/worker_launch.h"
#include "base/exit_codes.h"
#include "base/log.h"
#include "rendezvous/c10d_rendezvous.h"
#include "rendezvous/etcd_rendezvous.h"
#include "rendezvous/rendezvous_records.h"
#include "rendezvous/standalone_rendezvous.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kStderrTailLines = 20;
// A joining agent says where it waits only when its first round has not formed by then.
constexpr std::chrono::seconds kJoinNotice{5};

// The agent's log lines (base/log.h) on the thread that runs the agent, while a ConsoleScope
// lives: through its stderr sink, which never blocks the loop; outside io.run() written through at
// once. Other threads' lines go to descriptor 2 directly.
struct ConsoleLog final : LogSink {
  explicit ConsoleLog(ConsoleSink& e) : err(e) {}
  void write_log(std::string_view text) override {
    if (before_line) before_line();  // --collapse-logs: the workers' held lines come first
    err.write(text.data(), text.size());
    if (!in_loop) err.flush();
  }
  ConsoleSink& err;
  bool in_loop = false;
  std::function<void()> before_line;
};

// Log lines through `err` on this thread while it lives; both sinks written out at its end,
// however the agent's run ends.
struct ConsoleScope {
  ConsoleScope(ConsoleSink& o, ConsoleSink& e) : out(o), err(e), log(e), redirect(log) {}
  ~ConsoleScope() {
    log.in_loop = false;
    out.flush();
    err.flush();
  }
  ConsoleScope(const ConsoleScope&) = delete;
  ConsoleScope& operator=(const ConsoleScope&) = delete;
  ConsoleSink& out;
  ConsoleSink& err;
  ConsoleLog log;
  LogRedirect redirect;
};

// "2.5 s": a duration as crun's messages show it, to a tenth of a second.
std::string seconds_text(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + "." + std::to_string(d.count() % 1000 / 100) + " s";
}

// -1 (after one line saying why) when the file cannot be created: that log is dropped.
int open_log(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) log_line("cannot create " + path.string() + ": " + std::strerror(errno) + "; it is left out");
  return fd;
}

}  // namespace

struct Agent::Impl {
  explicit Impl(AgentConfig c)
      : config(std::move(c)),
        io(1),
        signals(io),
        stop_timer(io),
        machine(AgentPolicy{config.nproc_per_node, config.max_restarts, config.stop_timeout,
                            config.multi_node.has_value(),
                            // Progress is measured in heartbeat steps: without heartbeats there is none to see.
                            config.heartbeat_timeout.count() > 0 || config.initial_heartbeat_timeout.count() > 0 ||
                                    config.heartbeat_auto
                                ? config.max_no_progress_restarts
                                : 0,
                            config.precheck}),
        hang_timer(io),
        hang_limits{config.initial_heartbeat_timeout,
                    config.heartbeat_auto ? config.initial_heartbeat_timeout : config.heartbeat_timeout},
        share_timer(io),
        join_notice(io),
        exclusion_wait(io),
        node_check_timer(io),
        stacks_timer(io) {}

  AgentConfig config;
  asio::io_context io;
  // Workers' console lines and the agent's own (say) go through these: a stalled console never
  // blocks the loop. One sink for both when they are one file (`2>&1`): lines keep one order.
  ConsoleSink console_out{io, 1};
  std::unique_ptr<ConsoleSink> own_err = ConsoleSink::same_stream(1, 2) ? nullptr : std::make_unique<ConsoleSink>(io, 2);
  ConsoleSink& console_err = own_err ? *own_err : console_out;
  // --collapse-logs: each stream's lines of the local ranks, collapsed (null when off). Declared
  // before the group, whose routers hand them lines until the group is gone.
  std::unique_ptr<ConsoleCollapser> collapse_out;
  std::unique_ptr<ConsoleCollapser> collapse_err;
  asio::signal_set signals;
  bool preempted = false;  // a preemption notice (SIGUSR1/SIGUSR2) arrived
  asio::steady_timer stop_timer;
  AgentStateMachine machine;
  std::unique_ptr<Rendezvous> rendezvous;      // standalone (one node), c10d or etcd-v3 (several)
  int rendezvous_round = -1;                   // the round the workers belong to
  int latest_stop_round = -1;                  // the newest round the coordinator ended
  std::unique_ptr<WorkerContainment> containment;  // outlives every group
  std::unique_ptr<StateDirectory> state;           // the ranks' CRUN_STATE_DIR, for the whole job
  std::shared_ptr<StateReplication> replication;   // multi-node: state that outlives this node
  std::unique_ptr<StatePersister> persister;       // --state-persist-dir
  bool start_held = false;                         // the round's start waits for its state (a fetch)
  std::unique_ptr<WorkerGroup> group;
  std::unique_ptr<StandbyPool> standbys;  // --standby-workers: spare interpreters for the next start
  RunDirectory run_dir;
  GroupStart next_start;  // what every start of the group shares (environment, agent id, watchdogs)
  RoundInfo current_round;
  std::optional<int> exit_code;
  std::optional<FailureReport> root_report;  // built once per root cause (report_for)
  asio::steady_timer hang_timer;                // the earliest heartbeat deadline of the group
  HangLimits hang_limits;
  std::unique_ptr<HeartbeatFiles> heartbeats;   // the current group's, when hang detection is on
  std::optional<HangWatch> hang_watch;          // while the group runs
  std::optional<HeartbeatEstimator> estimator;  // --heartbeat-timeout auto, while the group runs
  bool watching_heartbeats() const { return hang_limits.enabled() || config.heartbeat_auto; }
  std::uint64_t hang_generation = 0;            // a stale expiry (an earlier group's) is ignored
  std::unique_ptr<FileTimerServer> file_timer;  // torch's file timer, when enabled
  std::map<int, std::string> watchdog_notes;     // local rank -> what the watchdog did to it, this group
  std::uint64_t timer_generation = 0;  // a stale expiry (armed for an earlier stop) is ignored
  std::unique_ptr<OperatorView> view;      // health, metrics, status, events (always; its outputs may be off)
  std::unique_ptr<HttpEndpoint> endpoint;  // --health-check-port, when given
  asio::steady_timer share_timer;          // multi-node with the endpoint: re-publishes this node's status
  asio::steady_timer join_notice;          // a joiner's line when its first round is slow to form
  asio::steady_timer exclusion_wait;       // this node is excluded: it asks again when its cooldown ends
  std::unique_ptr<NodeChecks> node_checks;  // null when every check is off
  asio::steady_timer node_check_timer;      // the next try after an unhealthy verdict
  std::optional<AgentClock::time_point> unhealthy_since;  // the first unhealthy verdict of this wait
  // Stacks before the kill (agent/stack_capture.h): one capture per group, its result kept for
  // the failure report; actions that come while it runs wait in `held`, in order.
  std::unique_ptr<StackCapture> stack_capture;  // null: capture off
  std::filesystem::path python_stacks_dir;      // "" when Python workers dump no Python stacks
  std::optional<std::vector<RankStack>> group_stacks;
  std::vector<std::function<void()>> after_capture;
  std::optional<AgentActions> held;
  std::optional<int> hung_local_rank;  // the hung worker, SIGKILLed once its stacks are taken
  // NCCL flight recorder dumps before the kill (agent/flight_recorder.h): the settings read from
  // the workers' environment when crun asks for dumps, and this group's pipe and dump prefixes.
  std::optional<FlightRecorderSettings> flight_recorder;
  std::string flight_pipe_prefix, flight_dump_prefix;
  // Stacks before the kill (docs/operations.md, "Grouped across ranks"): this node's newest
  // capture, grouped; on node rank 0, the root cause's report it printed last, whose groups grow
  // as other nodes' arrive (gather_stacks).
  std::optional<StackGroups> own_stacks;
  std::optional<FailureReport> shown_report;
  asio::steady_timer stacks_timer;  // node rank 0 without the endpoint: the nodes' records read for a while
  int stacks_reads_left = 0;

  int run();
  void wait_signal();
  void perform(const AgentActions& actions);
  void start_group(int restart_count, bool precheck = false);
  void read_precheck_verdict(int restart_count);
  std::optional<PrecheckReading> precheck_reading;  // the pre-flight check's verdict, once read
  void start_standbys(int restart_count);
  WorkerLaunch make_launch(const WorkerLaunchPlan& plan, const std::shared_ptr<DuplicateSink>& duplicate_stdout,
                           const std::shared_ptr<DuplicateSink>& duplicate_stderr);
  std::shared_ptr<DuplicateSink> duplicate_sink(const std::vector<std::string>& filters, int restart_count, const char* file);
  void report_failure(const action::ReportFailure& r);
  const FailureReport& report_for(const WorkerExit& e);
  void write_report_file(const FailureReport& report);
  void start_rendezvous();
  // The one way this agent asks for a round: at the start, after a round ended, and when an
  // answer came for a round already over.
  void join_round();
  void start_node_checks();
  void on_node_check(const NodeCheckResult& r);
  void say_joining_later(std::string line);
  void on_round(const RoundResult& r);
  void wait_excluded(const RoundResult& r);
  void on_control(const ControlEvent& e);
  void print_remote_report(const ControlEvent& e);
  void finish(int code);
  void start_file_timer();
  void on_timer_expired(const FileTimerExpiry& e);
  std::optional<int> worker_of(int pid) const;
  void watch_heartbeats();
  void check_heartbeats();
  void learn_heartbeat_timeout(const std::vector<std::optional<Heartbeat>>& beats);
  void on_hang(const Hang& h);
  bool capture_stacks(std::optional<int> focus_local_rank, std::function<void()> then);
  void signal_expired(const FileTimerExpiry& e);
  void start_stack_capture();
  void arrange_flight_recorder();
  void flight_recorder_for(int restart_count);
  void log_flight_dumps(const std::vector<RankStack>& stacks);
  void abandon_workers();
  bool start_operator_view();
  void share_status_later();
  std::optional<std::int64_t> highest_step() const;
  // The capture's result (capture_stacks): the stacks of this node's workers of group start
  // `restart_count`, taken before the kill, grouped, before the held actions run. A failure
  // published after it (a file timer's capture comes before the exit it causes) carries them;
  // one published first (the usual order) does not, and node rank 0 reads them from the record.
  void stacks_captured(int restart_count, const std::vector<RankStack>& stacks);
  void gather_stacks(bool announce = true);
  void watch_stacks();
  void gather_stacks_later();
  std::optional<WorkerRequest> read_requests(const WorkerExit& e);
  void begin_collapse(const std::vector<WorkerLaunchPlan>& plans);
  void flush_collapsed();

  // The job closes (agent/closing_stacks.h): each node writes its stacks of the round on a key
  // that outlives it and leaves once the store took them; node rank 0 holds its exit until every
  // other node's are in, or the bound (their capture timeout and kClosingMargin after the close).
  static constexpr std::chrono::seconds kClosingMargin{2};
  std::optional<AgentClock::time_point> closed_at;  // the close reached this node
  bool closed_on_failure = false;                   // it carried a root cause's report
  int stacks_record_round = -1;                     // the round this node's stacks record is for
  int stacks_writes = 0;                            // its records the store has not answered yet
  std::optional<int> held_exit;                     // the exit, held for the stacks
  std::optional<StacksGathering> gathering;         // node rank 0 while it holds its exit
  int gathering_answers = 0;
  asio::steady_timer closing_timer{io};
  void publish_own_stacks(const StackGroups& groups);
  bool hold_exit(int code);
  void gather_closing_stacks();
  void closing_stacks_arrived(int node_rank, const std::optional<std::string>& text);
  void end_gathering();
  void release_exit();
};

Agent::Agent(AgentConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Agent::~Agent() = default;
int Agent::run() { return impl_->run(); }

int Agent::Impl::run() {
  ::signal(SIGPIPE, SIG_IGN);
  ConsoleScope console(console_out, console_err);
  // fds 0-2 must be open, or a worker pipe could land on one of them and be lost in the dup2s.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
  if (!start_operator_view()) return kExitUsage;
  if (config.collapse_logs) {
    const LineCollapse::Limits limits{config.collapse_window};
    collapse_out = std::make_unique<ConsoleCollapser>(io, console_out, limits);
    collapse_err = std::make_unique<ConsoleCollapser>(io, console_err, limits);
    console.log.before_line = [this] { flush_collapsed(); };
  }
  try {
    const bool logs = keeps_worker_logs(config.redirects, config.tee);
    run_dir = RunDirectory::make(config.log_dir, config.temp_dir, config.run_id, logs);
    if (config.log_dir.empty() && logs) log_line("worker logs in " + run_dir.path().string());
    // Before any worker starts: the keeper. If this agent dies, it removes the temporary run dir.
    containment = std::make_unique<WorkerContainment>(io, run_dir.temporary() ? run_dir.path().string() : std::string(),
                                                      config.job_cgroup);
    if (config.standby_workers) standbys = std::make_unique<StandbyPool>(io, config.nproc_per_node, containment.get(), &console_err);
    // The keeper knows the state root before it exists: an agent killed from here on leaves none.
    const fs::path state_root = StateDirectory::job_root_for(config.state_root, config.run_id, ::getpid());
    if (!containment->remove_if_agent_dies(state_root.string())) {
      log_line("the keeper could not be told of " + state_root.string() + ": it stays behind if this agent is killed");
    }
    state = std::make_unique<StateDirectory>(io, state_root, config.state_max_bytes);
    if (config.multi_node && config.state_replication) {
      replication = std::make_shared<StateReplication>(io, *state, config.nproc_per_node,
                                                       StateReplicationOptions{config.multi_node->token});
    }
    if (!config.state_persist_dir.empty()) persister = std::make_unique<StatePersister>(config.state_persist_dir);
    if (replication || persister) {
      state->on_change([this](int rank) {
        if (replication) replication->changed(rank);
        if (!persister) return;
        if (auto set = committed_snapshot(*state, rank)) persister->changed(std::move(*set));
      });
    }
    start_node_checks();
    start_stack_capture();
    for (int s : config.handled_signals) signals.add(s);
    if (config.file_timer) start_file_timer();
    if (config.health_check_port) {
      endpoint = std::make_unique<HttpEndpoint>(io, config.health_check_addr, *config.health_check_port,
                                                [this](const std::string& path) { return view->serve(path); });
      const bool v6 = config.health_check_addr.find(':') != std::string::npos;
      log_line("health check, metrics and status at http://" + (v6 ? "[" + config.health_check_addr + "]" : config.health_check_addr) +
          ":" + std::to_string(endpoint->port()) + "/");
    }
    start_rendezvous();
    if (endpoint && config.multi_node) {
      view->set_sharing([this](std::string json, bool gather) { rendezvous->publish_status(std::move(json), gather); },
                        [this] { return rendezvous->job_status(); });
      share_status_later();
    }
  } catch (const std::exception& e) {
    log_line(std::string("cannot start the agent: ") + e.what());
    file_timer.reset();
    endpoint.reset();
    if (state) state->remove();
    containment.reset();  // ends the keeper, removes the job's cgroup
    run_dir.remove();  // made before the failure (if it was), and nothing was written to it yet
    return kExitAgentError;
  }
  next_start.base_env = current_environment();  // passed through to the workers
  if (!python_stacks_dir.empty()) {
    if (const std::string why = arrange_python_stacks(next_start.base_env, python_stacks_dir, python_stacks_signal()); !why.empty()) {
      log_line("no Python stacks before a kill: " + why);
      python_stacks_dir.clear();
    }
  }
  if (config.python_stacks && stack_capture) arrange_flight_recorder();
  next_start.agent_id = containment->agent_id();
  next_start.heartbeats = watching_heartbeats();
  if (file_timer) next_start.timer_file = file_timer->path();
  wait_signal();
  perform(machine.start(AgentClock::now()));
  if (!exit_code) {
    console.log.in_loop = true;
    io.run();
    console.log.in_loop = false;
  }
  endpoint.reset();  // nothing answers once the loop has stopped: refuse rather than hang
  group.reset();  // SIGKILLs what is left of the workers' trees
  flush_collapsed();
  node_checks.reset();  // a check still running is killed (its containment still there)
  stack_capture.reset();  // an eu-stack still running is killed
  standbys.reset();  // and the standbys
  if (replication) replication->close();  // its connections closed before the state they read goes
  if (persister) {  // the commits still queued read, each rank's newest set copied before the state goes
    std::vector<int> ranks;
    for (int lr = 0; lr < config.nproc_per_node; ++lr) ranks.push_back(current_round.rank_offset + lr);
    state->prepare_for_start(ranks);
    for (int rank : ranks) {
      if (auto set = committed_snapshot(*state, rank)) persister->changed(std::move(*set));
    }
    persister.reset();  // copies what waits, then its thread ends
  }
  state->remove();  // the job is over: its state goes (before the keeper is released)
  file_timer.reset();  // removes its FIFO
  containment->release();  // the keeper removes the job's cgroup and exits meanwhile
  // The host keeps the store up until the others have left; after a preemption notice the others
  // are still checkpointing, so it waits for them up to the grace period (and a little more).
  rendezvous->shutdown(preempted ? config.stop_timeout + std::chrono::seconds(5) : std::chrono::milliseconds(0));
  if (run_dir.temporary()) run_dir.remove();
  containment->finish();
  return exit_code.value_or(kExitAgentError);
}

void Agent::Impl::wait_signal() {
  signals.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (is_preemption_notice(signo)) {
      preempted = true;
      log_line("received " + signal_name(signo) + " (preemption notice): forwarded to the workers, which have " +
          seconds_text(config.stop_timeout) + " (--stop-timeout) to checkpoint and exit; no restart follows");
    } else {
      log_line("received " + signal_name(signo) + ", forwarding it to the workers and stopping");
    }
    view->signal(signo, is_preemption_notice(signo));
    if (held_exit) {  // waiting for the stacks (hold_exit): a signal ends the wait with what is in
      gathering ? end_gathering() : release_exit();
      return;
    }
    perform(machine.on_signal(signo, AgentClock::now()));
    if (!exit_code) wait_signal();
  });
}

void Agent::Impl::perform(const AgentActions& actions) {
  if (held) {  // a capture runs: after it, in order
    held->insert(held->end(), actions.begin(), actions.end());
    return;
  }
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const auto& a = actions[i];
    if (exit_code) return;
    if (std::holds_alternative<action::CaptureStacks>(a)) {
      held = AgentActions(actions.begin() + static_cast<std::ptrdiff_t>(i) + 1, actions.end());
      const auto root = machine.root_cause();
      const auto began = AgentClock::now();
      const bool waits = capture_stacks(root ? std::optional<int>(root->local_rank) : std::nullopt, [this, began] {
        AgentActions rest = std::move(*held);
        held.reset();
        // The stop grace counts from the signal, which waited for the capture.
        for (auto& r : rest) {
          if (auto* arm = std::get_if<action::ArmStopTimer>(&r)) arm->deadline += AgentClock::now() - began;
        }
        perform(rest);
      });
      if (waits) return;
      held.reset();
    } else if (auto* start = std::get_if<action::StartGroup>(&a)) {
      start_group(start->restart_count, start->precheck);
    } else if (auto* sig = std::get_if<action::SignalGroup>(&a)) {
      // Its stacks taken: the hung worker first (its process group), unless it ended meanwhile.
      if (const auto lr = std::exchange(hung_local_rank, std::nullopt); lr && group && group->is_running(*lr)) {
        ::kill(-group->pid(*lr), SIGKILL);
      }
      if (group) group->signal_all(sig->signo);
    } else if (std::holds_alternative<action::AbandonWorkers>(a)) {
      abandon_workers();
    } else if (std::holds_alternative<action::KillGroup>(a)) {
      log_line("workers still running " + std::to_string(config.stop_timeout.count()) +
          " ms after the stop signal; sending SIGKILL");
      if (group) group->kill_all();
    } else if (auto* arm = std::get_if<action::ArmStopTimer>(&a)) {
      stop_timer.expires_at(arm->deadline);
      const std::uint64_t generation = ++timer_generation;
      stop_timer.async_wait([this, generation](const boost::system::error_code& ec) {
        if (ec || generation != timer_generation) return;
        perform(machine.on_stop_timeout(AgentClock::now()));
      });
    } else if (std::holds_alternative<action::CancelStopTimer>(a)) {
      ++timer_generation;
      stop_timer.cancel();
    } else if (auto* known = std::get_if<action::FailureKnown>(&a)) {
      const WorkerExit& root = known->root_cause;
      view->failure_known(current_round.rank_offset + root.local_rank, root.local_rank, root.status, known->last);
    } else if (auto* report = std::get_if<action::ReportFailure>(&a)) {
      report_failure(*report);
    } else if (auto* exit = std::get_if<action::Exit>(&a)) {
      if (hold_exit(exit->code)) return;  // the stacks first (agent/closing_stacks.h)
      finish(exit->code);
    } else if (std::holds_alternative<action::JoinRound>(a)) {
      join_round();
    } else if (auto* pub = std::get_if<action::PublishFailure>(&a)) {
      // The coordinator decides restart or stop; the machine reports the root cause with its decision.
      RoundOutcome failure;
      failure.exit_code = pub->root_cause.crun_exit_code();
      failure.wall_time_us =
          std::chrono::duration_cast<std::chrono::microseconds>(pub->root_cause.wall_time.time_since_epoch()).count();
      failure.report = report_for(pub->root_cause).to_json();
      failure.highest_step = highest_step();
      if (const auto& request = pub->root_cause.request) add_to_outcome(failure, *request, failure.exit_code);
      rendezvous->publish_failure(rendezvous_round, failure);
    } else if (std::holds_alternative<action::PublishSuccess>(a)) {
      rendezvous->publish_success(rendezvous_round);
    } else if (std::holds_alternative<action::PrecheckDone>(a)) {
      perform(machine.on_precheck_verdict(!precheck_reading || precheck_reading->proceed));
    }
  }
}

void Agent::Impl::finish(int code) {
  exit_code = code;
  view->stopped(code);
  share_timer.cancel();
  boost::system::error_code ignored;
  signals.cancel(ignored);
  stop_timer.cancel();
  hang_timer.cancel();
  join_notice.cancel();
  node_check_timer.cancel();
  stacks_timer.cancel();
  closing_timer.cancel();
  io.stop();
}

void Agent::Impl::start_group(int restart_count, bool precheck) {
  group.reset();  // the previous round's workers are all gone by now
  hang_watch.reset();
  estimator.reset();
  group_stacks.reset();
  hung_local_rank.reset();
  heartbeats = watching_heartbeats() ? std::make_unique<HeartbeatFiles>(config.nproc_per_node) : nullptr;
  watchdog_notes.clear();
  if (file_timer) file_timer->clear();
  try {
    next_start.restart_count = restart_count;
    next_start.round = current_round;
    // Each rank's CRUN_STATE_DIR holds exactly what it committed before.
    std::vector<int> ranks;
    for (int lr = 0; lr < config.nproc_per_node; ++lr) ranks.push_back(current_round.rank_offset + lr);
    state->prepare_for_start(ranks);
    next_start.state_root = state->job_root().string();
    flight_recorder_for(restart_count);
    const auto duplicate_stdout = duplicate_sink(config.duplicate_stdout_filters, restart_count, "filtered_stdout.log");
    const auto duplicate_stderr = duplicate_sink(config.duplicate_stderr_filters, restart_count, "filtered_stderr.log");
    std::vector<WorkerLaunch> launches;
    std::vector<WorkerLaunchPlan> plans;
    launches.reserve(static_cast<std::size_t>(config.nproc_per_node));
    for (int lr = 0; lr < config.nproc_per_node; ++lr) {
      plans.push_back(plan_worker_launch(config, run_dir, next_start, lr));
      if (precheck) {
        use_precheck(plans.back(), precheck_beside_this_program(), config.precheck_slowdown,
                     run_dir.attempt_file(restart_count, "precheck.json").string());
      }
      launches.push_back(make_launch(plans.back(), duplicate_stdout, duplicate_stderr));
    }
    if (collapse_out) begin_collapse(plans);
    for (int lr = 0; standbys && !precheck && lr < config.nproc_per_node; ++lr) {
      // From here the standby runs this launch: WorkerGroup::start adopts it.
      StandbyPool::Taken taken = standbys->take(lr, plans[static_cast<std::size_t>(lr)]);
      if (taken.worker) launches[static_cast<std::size_t>(lr)].adopted = taken.worker;
      else if (!taken.why.empty()) log_line("local rank " + std::to_string(lr) + " starts cold: " + taken.why);
    }
    group = std::make_unique<WorkerGroup>(
        io, restart_count,
        [this, precheck](const WorkerExit& e) {
          // Decide outside the group's own handler: a restart destroys the group.
          if (file_timer) file_timer->forget(e.pid);
          view->worker_exited(e.local_rank, e.pid, e.status, machine.state() == AgentStateMachine::State::kStopping);
          if (hang_watch) hang_watch->exited(e.local_rank);
          if (heartbeats) {  // the worker's last step, for the no-progress rule
            if (auto beat = heartbeats->read(e.local_rank); beat && beat->monotonic_ns != 0) machine.record_step(beat->step);
          }
          if (precheck && e.local_rank == 0 && !e.failed()) read_precheck_verdict(e.restart_count);
          WorkerExit exit = e;
          exit.request = read_requests(e);  // a request takes effect as its worker exits
          asio::post(io, [this, exit = std::move(exit)] {
            if (!exit_code) perform(machine.on_worker_exit(exit));
          });
        },
        containment.get());
    group->start(std::move(launches));
    std::vector<int> pids;
    for (int lr = 0; lr < group->size(); ++lr) pids.push_back(group->pid(lr));
    view->group_started(restart_count, pids);
    start_standbys(restart_count);
    if (watching_heartbeats()) {
      hang_watch.emplace(hang_limits, config.nproc_per_node, AgentClock::now());
      if (config.heartbeat_auto) {
        AutoTimeoutRule rule;
        rule.ceiling = config.heartbeat_auto_ceiling;
        estimator.emplace(rule, config.nproc_per_node);
        view->heartbeat_timeout("auto: learning (" + (hang_limits.steady.count() > 0
                                                         ? "initial limit " + seconds_text(hang_limits.steady)
                                                         : std::string("no limit")) + ")");
      } else {
        view->heartbeat_timeout(hang_limits.steady.count() > 0 ? seconds_text(hang_limits.steady) : "");
      }
      watch_heartbeats();
    }
  } catch (const std::exception& e) {
    log_line(std::string("cannot start workers: ") + e.what());
    group.reset();
    finish(kExitAgentError);
  }
}

// Standbys for the next start, once this one's workers run (agent/standby_plan.h decides which).
void Agent::Impl::start_standbys(int restart_count) {
  if (!standbys) return;
  for (int lr : standbys_to_start(config, restart_count, standbys->kept())) {
    if (auto plan = plan_standby_launch(config, run_dir, next_start, lr)) standbys->start(lr, *plan);
  }
}

// torch's --duplicate-std{out,err}-filters: the tee'd lines that match, of every local rank, in
// attempt_<N>/filtered_std{out,err}.log (nullptr: no filters, or the file cannot be made).
std::shared_ptr<DuplicateSink> Agent::Impl::duplicate_sink(const std::vector<std::string>& filters, int restart_count,
                                                           const char* file) {
  if (filters.empty()) return nullptr;
  const fs::path path = run_dir.attempt_file(restart_count, file);
  fs::create_directories(path.parent_path());
  const int fd = open_log(path);
  return fd < 0 ? nullptr : std::make_shared<DuplicateSink>(fd, filters, path.string());
}

// What a worker's plan names, made: its directory (without a stale error file: a membership
// round reuses attempt_<restart>), its heartbeat file, its logs opened, its streams routed.
WorkerLaunch Agent::Impl::make_launch(const WorkerLaunchPlan& plan, const std::shared_ptr<DuplicateSink>& duplicate_stdout,
                                      const std::shared_ptr<DuplicateSink>& duplicate_stderr) {
  fs::create_directories(plan.dir);
  fs::remove(plan.error_file);
  // CRUN_CONTROL_FILE, empty at each start (a membership round reuses attempt_<restart>).
  fs::remove(plan.control_file);
  if (const int fd = ::open(plan.control_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600); fd >= 0) {
    ::close(fd);
  } else {
    log_line("cannot create " + plan.control_file + ": " + std::strerror(errno) + "; local rank " +
             std::to_string(plan.local_rank) + " cannot send requests");
  }
  if (!plan.heartbeat_file.empty()) heartbeats->make(plan.local_rank, plan.heartbeat_file);
  WorkerLaunch launch;
  launch.program = plan.program;
  launch.argv = plan.argv;
  launch.env = plan.env;
  launch.cpus = plan.cpus;
  auto route = [&](const StreamPlan& s, int console_fd, const std::shared_ptr<DuplicateSink>& duplicate) {
    StreamRoute r;
    r.file_path = s.file;
    if (!s.file.empty()) r.file_fd = open_log(s.file);
    if (s.console) {
      r.console_fd = console_fd;
      r.console = console_fd == 1 ? &console_out : &console_err;
      r.console_prefix = s.console_prefix;
      if (s.duplicate) r.duplicate = duplicate;
      r.collapse = console_fd == 1 ? collapse_out.get() : collapse_err.get();
      r.local_rank = plan.local_rank;
    }
    return r;
  };
  launch.stdout_route = route(plan.out, 1, duplicate_stdout);
  launch.stderr_route = route(plan.err, 2, duplicate_stderr);
  launch.stderr_route.tail_lines = kStderrTailLines;
  return launch;
}

void Agent::Impl::report_failure(const action::ReportFailure& r) {
  FailureReport report = report_for(r.root_cause);
  report.restarting = r.restarting;
  if (group_stacks) report.stacks = *group_stacks;
  report.no_progress = r.no_progress;
  log_text(report.format_text());
  if (r.root_cause.request && r.root_cause.request->kind == WorkerRequest::Kind::kExcludeNode && !config.multi_node) {
    log_line("rank " + std::to_string(report.rank) + " asked to exclude this node, and on one node none can take its place: exit " +
             std::to_string(kExitNodeUnhealthy) + " (this node is unhealthy)");
  }
  {
    // /status and the status a node shares stay small: the raw per-rank stacks go to the file only.
    FailureReport shown = report;
    shown.stacks.clear();
    view->failure(shown, r.restarting, "");
  }
  const std::string& parent_error_file = config.launcher_error_file;
  if (!r.restarting && !parent_error_file.empty()) {
    // Like torchrun under a scheduler that set TORCHELASTIC_ERROR_FILE for the launcher: the
    // final root cause's error file (if the worker wrote one) becomes the launcher's.
    const std::string why = copy_error_file_to_parent(report.error_file, parent_error_file, r.root_cause.status);
    log_line(why.empty() ? "copied the root cause's error file to " + parent_error_file
                         : parent_error_file + " (TORCHELASTIC_ERROR_FILE) left as it is: " + why);
  }
  write_report_file(report);
  shown_report = report;
  gather_stacks();
  watch_stacks();
}

// failure_report.json in the log dir (not in a temporary run dir, which is removed at exit).
void Agent::Impl::write_report_file(const FailureReport& report) {
  if (run_dir.temporary()) return;
  if (const std::string why = write_failure_report(report, run_dir.report_file().string()); !why.empty()) {
    log_line(why);
  }
}

// The report of this node's root cause, built the first time it is needed (published to the
// rendezvous at once, printed once the group has stopped): the stderr tail is complete by then,
// as the worker's pipes were drained before its exit was delivered.
const FailureReport& Agent::Impl::report_for(const WorkerExit& e) {
  if (root_report && root_report->pid == e.pid && root_report->restart_count == e.restart_count &&
      root_report->local_rank == e.local_rank) {
    return *root_report;
  }
  RootCauseFacts facts;
  facts.role = config.role;
  facts.host = config.hostname;
  facts.addr = rendezvous->node_address();
  facts.rank_offset = current_round.rank_offset;
  facts.error_file = (run_dir.attempt_dir(e.restart_count, e.local_rank) / "error.json").string();
  if (group) {
    const auto& tail = group->stderr_tail(e.local_rank);
    facts.stderr_tail.assign(tail.begin(), tail.end());
  }
  if (auto note = watchdog_notes.find(e.local_rank); note != watchdog_notes.end()) facts.watchdog = note->second;
  if (e.request) facts.request = request_text(*e.request);
  root_report = assemble_failure_report(e, std::move(facts));
  if (own_stacks && own_stacks->attempt == e.restart_count) root_report->stack_groups = *own_stacks;
  return *root_report;
}

void Agent::Impl::start_file_timer() {
  const std::string path = config.file_timer->empty() ? (run_dir.path() / "file_timer").string() : *config.file_timer;
  FileTimerServer::Callbacks cb;
  cb.owns = [this](int pid) { return worker_of(pid).has_value(); };
  cb.on_expired = [this](const FileTimerExpiry& e) { on_timer_expired(e); };
  cb.log = [](const std::string& line) { log_line(line); };
  file_timer = std::make_unique<FileTimerServer>(io, path, std::move(cb));
}

// The running worker `pid` is, or whose process group it belongs to (a worker leads its own).
std::optional<int> Agent::Impl::worker_of(int pid) const {
  if (!group || pid <= 0) return std::nullopt;
  const pid_t pgid = ::getpgid(pid);
  for (int lr = 0; lr < group->size(); ++lr) {
    if (group->is_running(lr) && (group->pid(lr) == pid || group->pid(lr) == pgid)) return lr;
  }
  return std::nullopt;
}

// torch's FileTimerServer sends the requested signal to the pid that opened the scope; the
// worker's exit then takes the ordinary failure path, its report saying what the timer saw.
void Agent::Impl::on_timer_expired(const FileTimerExpiry& e) {
  if (exit_code) return;
  const auto& r = e.request;
  const auto lr = worker_of(r.pid);
  if (!lr) return;  // gone meanwhile: its exit is on its way
  // Its stacks (and the others') before the signal that usually ends it.
  if (!capture_stacks(*lr, [this, e] { signal_expired(e); })) signal_expired(e);
}

void Agent::Impl::signal_expired(const FileTimerExpiry& e) {
  if (exit_code) return;
  const auto& r = e.request;
  const auto lr = worker_of(r.pid);
  if (!lr) return;  // gone meanwhile: its exit is on its way
  std::string what = "file timer scope '" + r.scope_id + "' of local rank " + std::to_string(*lr) + " (pid " +
                     std::to_string(r.pid) + ") ran " + std::to_string(e.overdue.count()) + " ms past its deadline";
  if (r.signal > 0) {
    if (::kill(r.pid, r.signal) == 0) {
      what += "; sent " + signal_name(r.signal);
    } else {
      what += "; could not signal it: " + std::string(std::strerror(errno));
    }
  } else {
    what += "; not signalled (the scope asked for signal " + std::to_string(r.signal) + ")";
  }
  log_line(what);
  watchdog_notes[*lr] = what;
  view->watchdog(*lr, r.pid, FailureReason::kTimer, what);
}

// Workers still there a grace period after SIGKILL (in uninterruptible sleep, or held by a
// tracer) are left behind, each named with what /proc says of it, so that stopping is bounded.
void Agent::Impl::abandon_workers() {
  if (!group) return;
  std::vector<std::pair<int, std::string>> stuck;
  for (int lr = 0; lr < group->size(); ++lr) {
    if (group->is_running(lr)) stuck.emplace_back(lr, process_state(group->pid(lr)));
  }
  std::vector<int> abandoned;
  for (const auto& [lr, state] : stuck) abandoned.push_back(lr);
  group->abandon();
  view->workers_abandoned(abandoned);
  for (const auto& [lr, state] : stuck) {
    log_line("local rank " + std::to_string(lr) + " (pid " + std::to_string(group->pid(lr)) + ") is still there " +
        seconds_text(config.stop_timeout) + " after SIGKILL" + (state.empty() ? "" : ": " + state) + "; left behind, crun goes on without it");
  }
}

// The highest step any worker of the group has beaten with so far (nullopt: no beats, or off).
std::optional<std::int64_t> Agent::Impl::highest_step() const {
  if (!heartbeats || !group) return std::nullopt;
  std::optional<std::int64_t> best;
  for (int lr = 0; lr < group->size(); ++lr) {
    if (auto beat = heartbeats->read(lr); beat && beat->monotonic_ns != 0 && (!best || beat->step > *best)) best = beat->step;
  }
  return best;
}

// One timer for the group's earliest heartbeat deadline; the files are read only then.
void Agent::Impl::watch_heartbeats() {
  const std::uint64_t generation = ++hang_generation;
  hang_timer.cancel();
  auto due = hang_watch ? hang_watch->next_deadline() : std::nullopt;
  if (hang_watch && estimator) {  // auto: the files are also read often enough to see each beat
    const auto sample = AgentClock::now() + estimator->sample_period();
    if (!due || sample < *due) due = sample;
  }
  if (!due) return;
  hang_timer.expires_at(*due);
  hang_timer.async_wait([this, generation](const boost::system::error_code& ec) {
    if (ec || generation != hang_generation || exit_code) return;
    check_heartbeats();
  });
}

void Agent::Impl::check_heartbeats() {
  // Only a running group is watched: workers we are stopping may well fall silent.
  if (!group || !hang_watch || machine.state() != AgentStateMachine::State::kRunning) return;
  std::vector<std::optional<Heartbeat>> beats;
  for (int lr = 0; lr < group->size(); ++lr) beats.push_back(heartbeats->read(lr));
  if (estimator) learn_heartbeat_timeout(beats);
  if (auto hang = hang_watch->observe_group(beats, AgentClock::now())) {
    on_hang(*hang);
    return;
  }
  watch_heartbeats();
}

// --heartbeat-timeout auto: the beats fold into the estimate; once known it is the steady limit,
// logged and shown in /status when first set and when it moves by a quarter or more.
void Agent::Impl::learn_heartbeat_timeout(const std::vector<std::optional<Heartbeat>>& beats) {
  for (std::size_t lr = 0; lr < beats.size(); ++lr) estimator->observe(static_cast<int>(lr), beats[lr]);
  const auto timeout = estimator->timeout();
  if (!timeout) return;
  hang_watch->set_steady(*timeout);
  if (!estimator->take_change()) return;
  const auto& rule = estimator->rule();
  char factor[16];
  std::snprintf(factor, sizeof factor, "%g", rule.factor);
  const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  log_line("heartbeat timeout (auto): " + ms(*timeout) + " = " + factor + " x the longest of the last " +
           std::to_string(std::min(estimator->intervals_seen(), rule.window)) + " beat intervals (" +
           ms(estimator->longest_recent()) + "), floor " + ms(rule.floor) +
           (rule.ceiling.count() > 0 ? ", ceiling " + ms(rule.ceiling) : std::string()));
  view->heartbeat_timeout(ms(*timeout) + " (auto, " + factor + " x " + ms(estimator->longest_recent()) + ")");
}

// A hung worker is killed at once (SIGTERM rarely moves a process stuck in a collective), which
// also frees its peers; the state machine makes its exit the root cause and stops the group.
void Agent::Impl::on_hang(const Hang& h) {
  const int pid = group->pid(h.local_rank);
  std::string what = "local rank " + std::to_string(h.local_rank) + " (pid " + std::to_string(pid) + ") is hung: ";
  what += h.first_beat_missing ? "no first heartbeat " + seconds_text(h.silent_for) + " after it started"
                               : "no heartbeat for " + seconds_text(h.silent_for) + ", last at step " + std::to_string(h.last_step);
  if (const std::string state = process_state(pid); !state.empty()) what += "; " + state;
  what += "; sent SIGKILL";
  log_line(what);
  watchdog_notes[h.local_rank] = what;
  view->watchdog(h.local_rank, pid, FailureReason::kHang, what);
  hang_watch.reset();
  ++hang_generation;
  // The root cause is decided (and, multi-node, published) before the kill, so that no peer
  // failing on its death can be taken for it.
  WorkerExit killed;
  killed.restart_count = machine.restart_count();
  killed.local_rank = h.local_rank;
  killed.pid = pid;
  killed.status = ExitStatus::killed(SIGKILL);
  killed.when = AgentClock::now();
  killed.wall_time = std::chrono::system_clock::now();
  const auto actions = machine.on_worker_hung(killed, killed.when);
  // The worker leads its own process group. Killed with the stop's first signal, after its
  // stacks are taken (CaptureStacks comes first); at once when no stop follows.
  if (actions.empty()) ::kill(-pid, SIGKILL);
  else hung_local_rank = h.local_rank;
  perform(actions);
}

void Agent::Impl::start_rendezvous() {
  RendezvousListener l;
  l.on_round = [this](const RoundResult& r) { on_round(r); };
  l.on_control = [this](const ControlEvent& e) { on_control(e); };
  l.on_progress = [](const std::string& line) { log_line(line); };
  l.on_store_lost = [this](const std::string& why) {
    if (exit_code) return;
    log_line("lost the rendezvous store: " + why + "; stopping");
    view->store_lost(why);
    perform(machine.on_job_closed(kExitStoreLost, AgentClock::now()));
  };
  PostToLoop post = [this](std::function<void()> f) { asio::post(io, std::move(f)); };
  if (!config.multi_node) {
    rendezvous = std::make_unique<StandaloneRendezvous>(config.nproc_per_node, config.master_addr, config.master_port,
                                                        std::move(post), std::move(l));
    return;
  }
  const auto& m = *config.multi_node;
  RendezvousNodeConfig c;
  c.multi = m;
  c.hostname = config.hostname;
  c.nproc_per_node = config.nproc_per_node;
  c.role = config.role;
  c.max_restarts = config.max_restarts;
  c.master_port = config.master_port;
  if (replication) {
    // From the rendezvous' thread too (etcd-v3); the replication outlives the rendezvous' use of it.
    c.state_port = [r = replication](const std::string& addr) { return r->listen(addr); };
  }
  const std::string nodes = std::to_string(m.rendezvous.min_nodes) +
                            (m.rendezvous.max_nodes != m.rendezvous.min_nodes ? ".." + std::to_string(m.rendezvous.max_nodes) : "");
  if (m.backend == MultiNodeConfig::Backend::kEtcdV3) {
    auto etcd = std::make_unique<EtcdRendezvous>(std::move(c), std::move(post), std::move(l));
    say_joining_later("joining the etcd rendezvous at " + etcd->endpoints() + " (run '" + m.rendezvous.run_id +
                      "', " + nodes + " nodes)");
    rendezvous = std::move(etcd);
    return;
  }
  auto c10d = std::make_unique<C10dRendezvous>(std::move(c), std::move(post), std::move(l), io);
  const std::string where = " the rendezvous at " + c10d->store_endpoint() + " (run '" + m.rendezvous.run_id + "', " +
                            nodes + " nodes)";
  if (c10d->is_host()) log_line("hosting" + where);  // then the round's progress, at most once a second
  else say_joining_later("joining" + where);
  rendezvous = std::move(c10d);
}

// Progress lines are the store's host's: a joining agent prints one line per round, its rank
// (on_round); where it waits only when its first round has not formed kJoinNotice after the start.
void Agent::Impl::say_joining_later(std::string line) {
  join_notice.expires_after(kJoinNotice);
  join_notice.async_wait([this, line = std::move(line)](const boost::system::error_code& ec) {
    if (ec || exit_code || rendezvous_round >= 0) return;
    log_line(line + ": no round yet after " + std::to_string(kJoinNotice.count()) + " s, still waiting");
  });
}

// The node checks first (agent/node_checks.h): an unhealthy node does not ask for a round.
void Agent::Impl::join_round() {
  if (!node_checks) {
    rendezvous->request_round();
    return;
  }
  node_checks->run([this](const NodeCheckResult& r) { on_node_check(r); },
                   [this](const std::string& line) {
                     if (!exit_code) log_line(line);
                   });
}

// What the checks look at, and the GPUs' memory before the first start.
void Agent::Impl::start_node_checks() {
  const NodeCheckSettings& s = config.node_checks;
  NodeCheckTargets t;
  t.directories = {run_dir.path().string(), config.state_root};
  if (config.multi_node) {
    const auto& m = *config.multi_node;
    t.multi_node = true;
    t.announced_address = m.local_addr;
    t.rendezvous_host = m.backend == MultiNodeConfig::Backend::kEtcdV3
                            ? (m.etcd.endpoints.empty() ? std::string() : m.etcd.endpoints[m.etcd.first_endpoint % m.etcd.endpoints.size()].host)
                            : m.endpoint.host;
  }
  t.search_path = s.search_path;
  std::unique_ptr<GpuMemory> gpu = s.disabled.count("gpu") ? nullptr : open_nvml_memory();
  const bool any = gpu || !s.commands.empty() || !s.disabled.count("disk") || (t.multi_node && !s.disabled.count("net"));
  if (!any) return;
  node_checks = std::make_unique<NodeChecks>(io, s, std::move(t), std::move(gpu), containment.get());
  node_checks->take_baseline();
}

void Agent::Impl::on_node_check(const NodeCheckResult& r) {
  if (exit_code) return;
  if (r.healthy()) {
    if (unhealthy_since) log_line("node checks pass again; joining");
    unhealthy_since.reset();
    view->node_check(r);
    rendezvous->request_round();
    return;
  }
  const bool builtin = std::find(builtin_node_checks().begin(), builtin_node_checks().end(), r.check) != builtin_node_checks().end();
  const std::string line = "node check " + (builtin ? r.check : "'" + r.check + "'") + ": " + r.reason;
  view->node_check(r);
  const auto now = AgentClock::now();
  if (!config.multi_node) {
    log_line(line + "; this node is unhealthy, exiting");
    perform(machine.on_job_closed(kExitNodeUnhealthy, now));
    return;
  }
  if (!unhealthy_since) unhealthy_since = now;
  const auto join_timeout = config.multi_node->rendezvous.join_timeout;
  if (now - *unhealthy_since >= join_timeout) {
    log_line(line + "; still unhealthy at the end of the join timeout (" + seconds_text(join_timeout) + "), exiting");
    perform(machine.on_job_closed(kExitNodeUnhealthy, now));
    return;
  }
  log_line(line + "; not joining, next try in " + seconds_text(config.node_checks.interval));
  node_check_timer.expires_after(std::min<AgentClock::duration>(config.node_checks.interval, *unhealthy_since + join_timeout - now));
  node_check_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || exit_code) return;
    join_round();
  });
}

void Agent::Impl::on_round(const RoundResult& r) {
  if (exit_code) return;
  if (!r.error.empty() && r.excluded_for.count() > 0) {
    wait_excluded(r);
    return;
  }
  if (!r.error.empty()) {
    log_line(r.error);
    perform(machine.on_job_closed(r.exit_code, AgentClock::now()));
    return;
  }
  if (r.rendezvous_round <= latest_stop_round) {  // ended before we saw it: join the next one
    join_round();
    return;
  }
  rendezvous_round = r.rendezvous_round;
  current_round = r.info;
  join_notice.cancel();
  // --precheck: the job's first round only, where every node runs it (a node that first joins a
  // later round, a spare, starts its workers at once).
  if (r.rendezvous_round > 0) machine.forgo_precheck();
  if (config.multi_node) {
    log_line("round " + std::to_string(r.rendezvous_round) + ": node rank " + std::to_string(r.info.group_rank) +
        " of " + std::to_string(r.info.group_world_size) + ", restart " + std::to_string(r.info.restart_count) +
        ", master " + r.info.master_addr + ":" + std::to_string(r.info.master_port));
  }
  view->round(r.rendezvous_round, r.info, rendezvous->node_id(), rendezvous->node_address());
  if (config.multi_node) {
    std::vector<ExcludedNodeStatus> excluded;
    for (const auto& e : r.excluded) {
      excluded.push_back({e.node_id, e.hostname, e.addr, e.reason, e.times, static_cast<double>(e.until_unix_ms) / 1000.0});
    }
    view->excluded_nodes(std::move(excluded), r.exclusions_total);
  }
  if (!replication) {
    perform(machine.on_round(r.info.restart_count));
    return;
  }
  // The workers start once this node holds its ranks' state (fetched when the round moved a rank here).
  start_held = true;
  replication->on_round(r.rendezvous_round, r.info, [this, restart = r.info.restart_count](const FetchSummary& fetched) {
    start_held = false;
    if (fetched.ranks > 0 || !fetched.error.empty()) view->state_fetched(fetched.ranks, fetched.bytes, fetched.took, fetched.error);
    if (!exit_code) perform(machine.on_round(restart));
  });
}

void Agent::Impl::on_control(const ControlEvent& e) {
  if (exit_code || held_exit) return;
  const auto now = AgentClock::now();
  if (e.kind == ControlEvent::Kind::kClosed) {
    if (!closed_at) closed_at = now;
    closed_on_failure = closed_on_failure || !e.report.empty();
    print_remote_report(e);
    if (e.exit_code != 0) {
      log_line("the job closed: " + e.detail);
      view->job_closed(e.detail);
    }
    perform(machine.on_job_closed(e.exit_code, now));
    return;
  }
  latest_stop_round = std::max(latest_stop_round, e.round);
  if (e.round != rendezvous_round) return;  // an older round's, or one we have not joined yet
  if (start_held) {  // ended while its state was on its way: nothing started, join the next one
    start_held = false;
    replication->cancel();
    print_remote_report(e);  // another node's root cause: node rank 0 shows it all the same
    log_line("round " + std::to_string(e.round) + " ended before its workers started: " + e.detail);
    join_round();
    return;
  }
  print_remote_report(e);
  log_line("round " + std::to_string(e.round) + " ended: " + e.detail);
  view->round_ended(e.round, e.detail);
  perform(machine.on_round_ended(now));
}

// Node rank 0 shows every node's root cause (the failing node printed its own already) and
// writes it to its failure_report.json, with the coordinator's decision (restart or not).
void Agent::Impl::print_remote_report(const ControlEvent& e) {
  if (e.report.empty() || e.origin_node == rendezvous->node_id() || current_round.group_rank != 0) return;
  auto report = FailureReport::from_json(e.report);
  if (!report) {
    log_line("node " + e.origin_node + " reported a root cause that is not a failure report");
    return;
  }
  report->restarting = e.kind == ControlEvent::Kind::kStop;
  report->no_progress = e.kind == ControlEvent::Kind::kClosed && e.exit_code == kExitNoProgress;
  report->excluded = e.excluded;
  log_line("root cause reported by node " + e.origin_node + ":");
  shown_report = *report;
  gather_stacks(false);  // this node's own and those it read, when they are in: printed just below
  log_text(shown_report->format_text());
  view->failure(*shown_report, report->restarting, e.origin_node);
  write_report_file(*shown_report);
  watch_stacks();
}

// The events' handler first: a path that cannot be written is a usage error, before anything starts.
bool Agent::Impl::start_operator_view() {
  std::unique_ptr<EventLog> events;
  try {
    events = EventLog::open(config.event_log_handler);
  } catch (const std::exception& e) {
    log_line(e.what());
    return false;
  }
  view = std::make_unique<OperatorView>(
      OperatorIdentity{config.run_id, config.role, config.hostname, config.nproc_per_node, config.max_restarts}, std::move(events));
  view->set_heartbeats([this](int local_rank) -> std::optional<Heartbeat> {
    if (!heartbeats || !group) return std::nullopt;
    return heartbeats->read(local_rank);
  });
  return true;
}

// Heartbeat ages move while nothing else changes: node rank 0's view of this node is refreshed.
void Agent::Impl::share_status_later() {
  share_timer.expires_after(OperatorView::share_interval);
  share_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || exit_code) return;
    view->share();
    share_status_later();
  });
}

// The coordinator keeps this node out until its cooldown ends (docs/rendezvous.md, "Exclusion"):
// one line, its status, then the one way to ask again (join_round: its node checks run first).
// The job closing meanwhile reaches it as a control event (on_control).
void Agent::Impl::wait_excluded(const RoundResult& r) {
  log_line(r.error + "; asking again in " + seconds_text(r.excluded_for));
  const double until = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch() + r.excluded_for).count();
  view->self_excluded(r.excluded_reason, until);
  exclusion_wait.expires_after(r.excluded_for);
  exclusion_wait.async_wait([this](const boost::system::error_code& ec) {
    if (ec || exit_code) return;
    log_line("this node's exclusion ended: asking for a round again");
    join_round();
  });
}

// A worker's CRUN_CONTROL_FILE, read as it exits: one line for every request (its rank and its
// reason) and for every line ignored; the governing request goes to the state machine.
std::optional<WorkerRequest> Agent::Impl::read_requests(const WorkerExit& e) {
  const ControlFileReading reading = read_control_file(run_dir.control_file(e.restart_count, e.local_rank).string());
  const int rank = current_round.rank_offset + e.local_rank;
  const std::string who = "rank " + std::to_string(rank) + " (local rank " + std::to_string(e.local_rank) + ", pid " +
                          std::to_string(e.pid) + ")";
  for (const auto& why : reading.ignored) log_line(who + ": CRUN_CONTROL_FILE " + why + "; ignored");
  if (reading.more_ignored > 0) {
    log_line(who + ": CRUN_CONTROL_FILE: " + std::to_string(reading.more_ignored) + " more lines ignored");
  }
  for (const auto& r : reading.requests) {
    const bool stop = r.kind == WorkerRequest::Kind::kStopJob;
    log_line(who + " asks crun to " + (stop ? "stop the job" : "exclude this node") + " (" + std::string(verb_of(r.kind)) +
             "): " + (r.reason.empty() ? "no reason given" : r.reason));
    view->worker_request(rank, e.local_rank, e.pid, request_text(r));
  }
  if (reading.more_requests > 0) {
    log_line(who + ": CRUN_CONTROL_FILE: " + std::to_string(reading.more_requests) + " more requests");
  }
  if (reading.governing && reading.requests.size() + reading.more_requests > 1) {
    log_line(who + ": the request that counts: " + request_text(*reading.governing));
  }
  return reading.governing;
}

// --precheck: local rank 0's verdict, as it exits 0 (on a slow node, before its request is read):
// one line, the status and the event.
void Agent::Impl::read_precheck_verdict(int restart_count) {
  precheck_reading = read_precheck(run_dir.attempt_file(restart_count, "precheck.json").string());
  log_line(precheck_reading->line);
  view->precheck(precheck_reading->line, precheck_reading->verdict);
}

// --collapse-logs: a start of the group. Every console line carries a prefix, even where the
// rank's stream has none without collapsing (no --tee): a collapsed line must say whose it is.
void Agent::Impl::begin_collapse(const std::vector<WorkerLaunchPlan>& plans) {
  std::vector<bool> out_shown;
  std::vector<bool> err_shown;
  for (const auto& p : plans) {
    out_shown.push_back(p.out.console);
    err_shown.push_back(p.err.console);
  }
  auto prefix = [tmpl = config.log_line_prefix_template, role = config.role,
                 offset = current_round.rank_offset](const std::vector<int>& ranks) {
    return log_line_prefix_for_ranks(tmpl, role, offset, ranks);
  };
  collapse_out->begin(out_shown, prefix);
  collapse_err->begin(err_shown, prefix);
}

// Before crun's own lines and at the end: what the collapsers hold goes out, in order.
void Agent::Impl::flush_collapsed() {
  if (collapse_out) collapse_out->flush();
  if (collapse_err) collapse_err->flush();
}

void Agent::Impl::stacks_captured(int restart_count, const std::vector<RankStack>& stacks) {
  own_stacks = crun::group_stacks(stacks, restart_count);
  view->stacks_captured(*own_stacks);
  publish_own_stacks(*own_stacks);  // for node rank 0, should the job close (agent/closing_stacks.h)
  if (config.multi_node && !endpoint && current_round.group_rank != 0) {
    rendezvous->publish_status(view->status().to_json(), false);  // without the endpoint nothing else shares it
  }
  // Printed and written with this node's root cause once the group has stopped.
  if (root_report && root_report->restart_count == restart_count) root_report->stack_groups = *own_stacks;
  gather_stacks();
  if (shown_report && shown_report->restart_count == restart_count) watch_stacks();
}

// Node rank 0, multi-node: the root cause it showed gets every node's groups of that start of the
// group it has: those that came with the report, its own, and those in the nodes' status records
// (watch_stacks). When they grow after the report was printed, the new grouping is printed and
// failure_report.json written again.
void Agent::Impl::gather_stacks(bool announce) {
  if (!config.multi_node || !shown_report || current_round.group_rank != 0) return;
  std::vector<StackGroups> parts{shown_report->stack_groups};
  if (own_stacks) parts.push_back(*own_stacks);
  StackGroups merged = merged_stack_groups(rendezvous->job_status(), config.run_id, shown_report->restart_count, std::move(parts));
  if (merged.empty() || merged == shown_report->stack_groups) return;
  const bool printed = !shown_report->stack_groups.empty();
  shown_report->stack_groups = std::move(merged);
  if (printed && announce) log_text(shown_report->stack_groups.text("crun:   "));
  write_report_file(*shown_report);
}

// Node rank 0, for up to 30 s after a root cause with stacks: merges the nodes' records every
// second (gather_stacks), until every rank of the round is in. With the operators' endpoint the
// records are shared and read back anyway; without it, a node that captured publishes its record
// once (stacks_captured) and node rank 0 has the rendezvous read them back for that while.
void Agent::Impl::watch_stacks() {
  if (!config.multi_node || current_round.group_rank != 0 || !shown_report) return;
  const bool captured = !shown_report->stack_groups.empty() || (own_stacks && own_stacks->attempt == shown_report->restart_count);
  if (!captured) return;  // no stacks this time (a capture off or failed everywhere): nothing to wait for
  if (stacks_reads_left == 0 && !endpoint) rendezvous->publish_status(view->status().to_json(), true);
  stacks_reads_left = 30;
  gather_stacks_later();
}

void Agent::Impl::gather_stacks_later() {
  stacks_timer.expires_after(std::chrono::seconds(1));
  stacks_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || exit_code || stacks_reads_left == 0) return;
    gather_stacks();
    const bool every_rank = shown_report && shown_report->stack_groups.rank_count() >= current_round.world_size;
    if (--stacks_reads_left > 0 && !every_rank) return gather_stacks_later();
    stacks_reads_left = 0;
    if (!endpoint) rendezvous->publish_status(view->status().to_json(), false);  // no more reading back
  });
}

}  // namespace crun

namespace crun {

void Agent::Impl::start_stack_capture() {
  if (config.capture_timeout.count() <= 0) return;
  StackCaptureOptions o;
  o.timeout = config.capture_timeout;
  o.python_signal = python_stacks_signal();
  o.containment = containment.get();
  const auto eu_stack = resolve_executable("eu-stack", config.node_checks.search_path);  // crun's PATH
  if (!eu_stack) log_line("eu-stack (elfutils) not found on PATH: no native stacks before a kill");
  o.eu_stack = eu_stack.value_or("");
  stack_capture = std::make_unique<StackCapture>(io, std::move(o));
  if (config.python_stacks) python_stacks_dir = run_dir.path() / "python_stacks";
}

// The running workers' stacks, once per group, then `then`; false (and `then` not kept) when no
// capture is to be made: off, no group, none running, or this group's already taken. A capture
// already running: `then` follows it.
bool Agent::Impl::capture_stacks(std::optional<int> focus_local_rank, std::function<void()> then) {
  if (!stack_capture || !group || group_stacks) return false;
  if (stack_capture->running()) {
    after_capture.push_back(std::move(then));
    return true;
  }
  std::vector<CaptureTarget> targets;
  for (int lr = 0; lr < group->size(); ++lr) {
    if (!group->is_running(lr)) continue;
    CaptureTarget t;
    t.local_rank = lr;
    t.rank = current_round.rank_offset + lr;
    t.pid = group->pid(lr);
    if (!python_stacks_dir.empty()) t.python_dump = python_dump_file(python_stacks_dir, t.pid);
    if (!flight_pipe_prefix.empty()) {
      t.flight_pipe = flight_pipe_file(flight_pipe_prefix, t.rank);
      t.flight_dump = flight_dump_file(flight_dump_prefix, t.rank);
    }
    targets.push_back(std::move(t));
  }
  if (targets.empty()) return false;
  after_capture.push_back(std::move(then));
  const auto began = AgentClock::now();
  const std::size_t count = targets.size();
  const int restart = machine.restart_count();
  stack_capture->run(std::move(targets), [this, began, count, focus_local_rank, restart](std::vector<RankStack> stacks) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(AgentClock::now() - began).count();
    std::size_t failed = 0;
    for (const auto& s : stacks) failed += s.error.empty() ? 0 : 1;
    log_line("took the stacks of " + std::to_string(count) + " local worker(s) in " + std::to_string(ms) + " ms before the stop" +
             (failed > 0 ? " (" + std::to_string(failed) + " incomplete)" : "") +
             (run_dir.temporary() ? "" : "; all in " + run_dir.report_file().string()));
    log_flight_dumps(stacks);
    {
      std::vector<int> ranks;
      std::vector<int> timed_out;
      for (const auto& s : stacks) {
        ranks.push_back(s.rank);
        if (s.error.find("timed out") != std::string::npos) timed_out.push_back(s.rank);
      }
      view->capture_ended(ranks, timed_out, std::chrono::milliseconds(ms));
    }
    for (const auto& s : stacks) {
      if (!focus_local_rank || s.local_rank != *focus_local_rank) continue;
      const std::string where = where_text(s);
      log_line("rank " + std::to_string(s.rank) + " (local rank " + std::to_string(s.local_rank) + ") was in " +
               (where.empty() ? "an unknown place" : where) + (s.error.empty() ? "" : " (" + s.error + ")"));
    }
    if (group && restart == machine.restart_count()) {  // else: a later group's now
      group_stacks = std::move(stacks);
      stacks_captured(restart, *group_stacks);  // grouped before the held actions publish the failure
    }
    auto waiting = std::move(after_capture);
    after_capture.clear();
    for (auto& f : waiting) {
      if (!exit_code) f();
    }
  });
  return true;
}

// The workers enabled torch's NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE > 0): crun asks
// each rank for its dump before a kill, through the pipe it has torch make in the run directory.
// Without a folder that stays (--log-dir, or the user's own dump prefix) none is asked for.
void Agent::Impl::arrange_flight_recorder() {
  FlightRecorderSettings s = read_flight_recorder(next_start.base_env);
  if (!s.error.empty()) {
    log_line(s.error + ": no NCCL flight recorder dump before a kill");
    return;
  }
  if (!s.enabled) return;
  if (s.dump_prefix.empty() && run_dir.temporary()) {
    log_line("the NCCL flight recorder is on, but its dumps before a kill need a folder that stays: give --log-dir "
             "(or TORCH_NCCL_DEBUG_INFO_TEMP_FILE); none will be asked for");
    return;
  }
  flight_recorder = std::move(s);
}

// Each start of the group has its own folder: a pipe or dump of an earlier start is never taken
// for this one's.
void Agent::Impl::flight_recorder_for(int restart_count) {
  flight_pipe_prefix.clear();
  flight_dump_prefix.clear();
  if (!flight_recorder) return;
  const fs::path dir = run_dir.attempt_file(restart_count, "flight_recorder");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    log_line("no NCCL flight recorder dumps before a kill this time: cannot make " + dir.string() + ": " + ec.message());
    return;
  }
  const std::string own = (dir / "nccl_trace_rank_").string();
  flight_pipe_prefix = flight_recorder->pipe_prefix.empty() ? own : flight_recorder->pipe_prefix;
  flight_dump_prefix = flight_recorder->dump_prefix.empty() ? own : flight_recorder->dump_prefix;
  set_flight_recorder(next_start.base_env, flight_pipe_prefix, flight_recorder->dump_prefix.empty() ? own : "");
}

// One line: how many ranks' dumps came and where; the first few that did not, and why.
void Agent::Impl::log_flight_dumps(const std::vector<RankStack>& stacks) {
  std::size_t asked = 0, whole = 0;
  std::string missing;
  int shown = 0;
  for (const auto& s : stacks) {
    if (s.flight_dump.empty()) continue;
    ++asked;
    if (s.flight_error.empty()) {
      ++whole;
    } else if (shown++ < 3) {
      missing += "; rank " + std::to_string(s.rank) + ": " + s.flight_error;
    }
  }
  if (asked == 0) return;
  if (shown > 3) missing += "; ...";
  log_line("NCCL flight recorder: the dumps of " + std::to_string(whole) + " of " + std::to_string(asked) +
           " rank(s) in " + fs::path(flight_dump_prefix).parent_path().string() + missing);
}

}  // namespace crun

namespace crun {

// Another node's stacks of this round, on the key node rank 0 reads when the job closes (after
// its status record is gone with it). Node rank 0 writes none: it is the one that gathers.
void Agent::Impl::publish_own_stacks(const StackGroups& groups) {
  if (!config.multi_node || current_round.group_rank == 0 || rendezvous_round < 0 || !rendezvous->keeps_stacks()) return;
  StacksRecord r{rendezvous_round, current_round.group_rank, rendezvous->node_id(), config.hostname, groups};
  stacks_record_round = rendezvous_round;
  ++stacks_writes;
  // Kept for node rank 0's wait: the capture timeout and the margin after the close (hold_exit).
  rendezvous->publish_stacks(r.round, r.node_rank, r.to_json(), config.capture_timeout + kClosingMargin, [this](bool taken) {
    --stacks_writes;
    if (!taken) log_line("could not write this node's stacks before the kill for node rank 0: they are in this node's report only");
    if (stacks_writes == 0 && held_exit) release_exit();
  });
}

// At Exit after the job closed, multi-node: true when the exit waits for the stacks. Any other
// node: its record of the round written (an empty one when it took none), then it leaves,
// within kClosingMargin. Node rank 0, after a root cause it showed: every other node's record.
bool Agent::Impl::hold_exit(int code) {
  if (!config.multi_node || !closed_at || held_exit || current_round.group_world_size < 2 || !rendezvous->keeps_stacks()) {
    return false;
  }
  if (current_round.group_rank != 0) {
    if (stacks_record_round != rendezvous_round && closed_on_failure) {  // node rank 0 waits only after a failure
      StackGroups none;
      none.attempt = current_round.restart_count;
      publish_own_stacks(none);
    }
    if (stacks_writes == 0) return false;
    held_exit = code;
    closing_timer.expires_after(kClosingMargin);
    closing_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) release_exit();
    });
    return true;
  }
  if (!stack_capture || !shown_report || shown_report->restart_count != current_round.restart_count) return false;
  held_exit = code;
  gather_closing_stacks();
  return true;
}

// Node rank 0: one request per other node, each parked at the store until its record comes or
// the bound (measured from the close: every node learnt of it then and captures within its
// --capture-timeout); a timer ends the wait at the bound whatever the store does.
void Agent::Impl::gather_closing_stacks() {
  stacks_timer.cancel();  // the status records' reading (watch_stacks) is over: this is the last merge
  stacks_reads_left = 0;
  const int nodes = current_round.group_world_size;
  gathering.emplace(rendezvous_round, shown_report->restart_count, nodes, current_round.group_rank);
  gathering_answers = 0;
  const auto now = AgentClock::now();
  const auto deadline = *closed_at + config.capture_timeout + kClosingMargin;
  const auto wait = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), std::chrono::milliseconds(100));
  for (int n = 1; n < nodes; ++n) {
    rendezvous->await_stacks(rendezvous_round, n, wait, [this, n](std::optional<std::string> text) { closing_stacks_arrived(n, text); });
  }
  closing_timer.expires_after(wait + std::chrono::milliseconds(500));
  closing_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) end_gathering();
  });
}

void Agent::Impl::closing_stacks_arrived(int node_rank, const std::optional<std::string>& text) {
  if (!gathering) return;
  ++gathering_answers;
  if (text && !gathering->arrived(node_rank, *text)) {
    std::string why;
    if (!StacksRecord::from_json(*text, &why)) log_line("node rank " + std::to_string(node_rank) + "'s stacks before the kill left out: " + why);
  }
  if (gathering->complete() || gathering_answers >= current_round.group_world_size - 1) end_gathering();
}

// Node rank 0: the final merge, printed when it grew, the nodes that sent none named, the report
// written once more, the event; then the exit that waited.
void Agent::Impl::end_gathering() {
  if (!gathering || !shown_report) return release_exit();
  std::vector<StackGroups> parts = gathering->parts();
  parts.push_back(shown_report->stack_groups);
  if (own_stacks) parts.push_back(*own_stacks);
  StackGroups merged = merged_stack_groups(rendezvous->job_status(), config.run_id, shown_report->restart_count, std::move(parts));
  if (!merged.empty() && merged != shown_report->stack_groups) {
    shown_report->stack_groups = std::move(merged);
    log_text(shown_report->stack_groups.text("crun:   "));
  }
  const auto missing = gathering->missing();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(AgentClock::now() - *closed_at);
  shown_report->stacks_missing_nodes = missing;
  if (!missing.empty()) {
    std::string list;
    for (int n : missing) list += (list.empty() ? "" : ", ") + std::to_string(n);
    log_line("no stacks before the kill came from node rank(s) " + list + " within " + seconds_text(waited) +
             " of the close (--capture-timeout + " + std::to_string(kClosingMargin.count()) + " s); the report names them");
  }
  write_report_file(*shown_report);
  view->stacks_gathered(gathering->in(), missing, waited, shown_report->stack_groups);
  release_exit();
}

void Agent::Impl::release_exit() {
  closing_timer.cancel();
  gathering.reset();
  if (!held_exit || exit_code) return;
  const int code = *held_exit;
  held_exit.reset();
  finish(code);
}

}  // namespace crun
