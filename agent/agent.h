// Agent: crun's per-node elastic agent for one job, on one node or as one of several.
//
// Contract
//   run() drives AgentStateMachine on one boost::asio::io_context: rendezvous round (one
//   Rendezvous, rendezvous/rendezvous_backend.h: StandaloneRendezvous on a single node,
//   C10dRendezvous or EtcdRendezvous on several; one code path for all) -> start the worker
//   group -> wait for the first event (a worker exit via pidfd, a handled signal, the stop grace
//   timer, the coordinator's control events) -> act. Returns crun's exit code, one of base/exit_codes.h's
//   table; of them, the agent's own: 2 when the events' file cannot be written
//   (--event-log-handler jsonl:PATH), 3 when it could not start (then the run dir it made is
//   removed again) or could not start workers (spawn failed, no free port).
//   The failure report is printed once per failed round to stderr (and written to the log dir as
//   failure_report.json; without --log-dir, the temporary run dir is removed at exit unless it
//   holds redirected logs). Worker output is routed per AgentConfig (passthrough, --redirects,
//   --tee with "[<role><local_rank>]:" prefixes or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE's
//   (agent/log_line_prefix.h), --local-ranks-filter). Each worker's arguments after the program go
//   through safe_substitute with its local_rank, as torch's agent does (agent/template_text.h).
//   What operators see (agent/operator_view.h): the events, per --event-log-handler (a path that
//   cannot be written: exit 2 before anything starts), and with --health-check-port the HTTP
//   endpoint on the agent's own loop (a port that cannot be bound: exit 3 before any worker);
//   multi-node, each node's status goes through the Rendezvous so that node rank 0 shows the job.
//   When a multi-node job closes after a failure (c10d), each other node writes its stacks before
//   the kill for node rank 0 and exits once they are taken (2 s at most), and node rank 0 exits
//   once every node's are in, or --capture-timeout + 2 s after the close (agent/closing_stacks.h).
//   No process of a worker's tree outlives the agent, even a SIGKILLed one (worker_containment.h:
//   child subreaper, the job's cgroup v2 or process groups and CRUN_AGENT_ID, the keeper process).
//   With --standby-workers, once a group runs each local rank gets a standby (agent/standby_plan.h
//   decides, agent/standby_pool.h holds them), which takes that rank's launch at the next start;
//   a rank without a live one starts cold, with one line saying why.
//
// Threading
//   run() is called once, on the thread that owns the job (main); it returns when the job ends.
//   Handled signals are caught while run() executes.
#pragma once

#include <memory>

#include "agent/agent_config.h"

namespace crun {

class Agent {
 public:
  explicit Agent(AgentConfig config);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crun
