#include "agent/agent_state_machine.h"

#include <csignal>

namespace crun {

bool is_preemption_notice(int signo) { return signo == SIGUSR1 || signo == SIGUSR2; }

AgentStateMachine::AgentStateMachine(AgentPolicy policy)
    : policy_(policy), progress_(policy.no_progress_limit), precheck_pending_(policy.precheck) {}

void AgentStateMachine::record_step(std::int64_t step) {
  if (!attempt_step_ || step > *attempt_step_) attempt_step_ = step;
}

AgentActions AgentStateMachine::start(AgentClock::time_point) {
  if (state_ != State::kIdle) return {};
  state_ = State::kJoining;
  return {action::JoinRound{}};
}

AgentActions AgentStateMachine::on_round(int restart_count) {
  if (state_ != State::kJoining) return {};
  restart_count_ = restart_count;
  return start_round();
}

AgentActions AgentStateMachine::on_round_ended(AgentClock::time_point now) {
  switch (state_) {
    case State::kRunning:
      round_ended_ = true;
      return begin_stop(0, now);
    case State::kStopping:
      round_ended_ = true;
      return {};
    case State::kWaiting: {
      AgentActions actions;
      report_decision(actions, /*restarting=*/true);
      state_ = State::kJoining;
      actions.push_back(action::JoinRound{});
      return actions;
    }
    default:
      return {};
  }
}

void AgentStateMachine::report_decision(AgentActions& actions, bool restarting, bool no_progress) {
  if (!policy_.coordinated || !root_cause_ || failure_reported_) return;
  failure_reported_ = true;
  actions.push_back(action::ReportFailure{*root_cause_, restarting, no_progress});
}

AgentActions AgentStateMachine::on_job_closed(int code, AgentClock::time_point now) {
  switch (state_) {
    case State::kRunning:
      closing_code_ = code;
      return begin_stop(0, now);
    case State::kStopping:
      if (!closing_code_) closing_code_ = code;
      return {};
    case State::kDone:
      return {};
    default: {
      AgentActions actions;
      report_decision(actions, /*restarting=*/false, code == kExitNoProgress);
      state_ = State::kDone;
      actions.push_back(action::Exit{code});
      return actions;
    }
  }
}

AgentActions AgentStateMachine::start_round() {
  state_ = State::kRunning;
  exited_ = 0;
  killed_ = false;
  round_ended_ = false;
  root_cause_.reset();
  attempt_step_.reset();
  failure_reported_ = false;
  requester_.reset();
  awaiting_verdict_ = false;
  precheck_group_ = precheck_pending_;
  precheck_pending_ = false;
  return {action::StartGroup{restart_count_, precheck_group_}};
}

AgentActions AgentStateMachine::on_worker_exit(const WorkerExit& exit) {
  if (exit.restart_count != restart_count_ || (state_ != State::kRunning && state_ != State::kStopping)) return {};
  ++exited_;
  AgentActions actions;
  if (exit.request) {
    take_request(exit, actions);
  } else if (state_ == State::kRunning && exit.failed()) {
    root_cause_ = exit;
    actions.push_back(failure_known(exit));
    if (policy_.coordinated) actions.push_back(action::PublishFailure{exit});
    auto stop = begin_stop(0, exit.when);
    actions.insert(actions.end(), stop.begin(), stop.end());
  }
  if (exited_ >= policy_.nproc) {
    auto rest = on_all_exited();
    actions.insert(actions.end(), rest.begin(), rest.end());
  }
  return actions;
}

action::FailureKnown AgentStateMachine::failure_known(const WorkerExit& root) const {
  return {root, !policy_.coordinated && (root.request || !restarts_remain(restart_count_, policy_.max_restarts))};
}

void AgentStateMachine::take_request(const WorkerExit& exit, AgentActions& actions) {
  const bool stop_job = exit.request->kind == WorkerRequest::Kind::kStopJob;
  // A stop-job from a worker that exited 0 is no failure: it ends the group without a root cause.
  const bool failure = exit.failed() || !stop_job;
  if (state_ == State::kRunning) {
    requester_ = exit;
    if (failure) {
      root_cause_ = exit;
      actions.push_back(failure_known(exit));
    }
    if (policy_.coordinated) actions.push_back(action::PublishFailure{exit});
    auto stop = begin_stop(0, exit.when);
    actions.insert(actions.end(), stop.begin(), stop.end());
    return;
  }
  // One node, stopping for a failure or a hang: the request still decides what follows.
  if (state_ != State::kStopping || policy_.coordinated || stop_signal_ != 0 || closing_code_) return;
  if (requester_ && (requester_->request->kind == WorkerRequest::Kind::kStopJob || !stop_job)) return;
  requester_ = exit;
  if (failure) root_cause_ = exit;
}

void AgentStateMachine::finish_request(AgentActions& actions) {
  state_ = State::kDone;
  if (requester_->request->kind == WorkerRequest::Kind::kExcludeNode) {
    actions.push_back(action::ReportFailure{*root_cause_, false});
    actions.push_back(action::Exit{kExitNodeUnhealthy});
    return;
  }
  if (!root_cause_) {  // stop-job from an exit 0, nothing failed before it
    actions.push_back(action::Exit{0});
    return;
  }
  actions.push_back(action::ReportFailure{*root_cause_, false});
  // An exclude-node from an exit 0 that a later stop-job left the root cause: still a failure.
  const int code = root_cause_->crun_exit_code();
  actions.push_back(action::Exit{code == 0 ? kExitNodeUnhealthy : code});
}

AgentActions AgentStateMachine::begin_stop(int signo, AgentClock::time_point now) {
  state_ = State::kStopping;
  stop_signal_ = signo;
  if (signo == 0) return {action::CaptureStacks{}, action::SignalGroup{SIGTERM}, action::ArmStopTimer{now + policy_.stop_timeout}};
  return {action::SignalGroup{signo}, action::ArmStopTimer{now + policy_.stop_timeout}};
}

AgentActions AgentStateMachine::on_signal(int signo, AgentClock::time_point now) {
  switch (state_) {
    case State::kIdle:
    case State::kJoining:
    case State::kWaiting: {
      AgentActions actions;
      report_decision(actions, /*restarting=*/false);  // this node leaves: it restarts nothing
      state_ = State::kDone;
      actions.push_back(action::Exit{kExitSignalBase + signo});
      return actions;
    }
    case State::kRunning:
      return begin_stop(signo, now);
    case State::kStopping: {
      // A signal while stopping: crun now ends for this signal (no restart) and forwards it. A
      // preemption notice already received keeps its code (138), so the job is still requeued
      // when the scheduler follows the notice with SIGTERM.
      if (!is_preemption_notice(stop_signal_)) stop_signal_ = signo;
      return {action::SignalGroup{signo}};
    }
    case State::kDone:
      return {};
  }
  return {};
}

AgentActions AgentStateMachine::on_stop_timeout(AgentClock::time_point now) {
  if (state_ != State::kStopping) return {};
  if (!killed_) {
    killed_ = true;
    return {action::KillGroup{}, action::ArmStopTimer{now + policy_.stop_timeout}};
  }
  // SIGKILL did not end them within the grace: leave them behind rather than wait forever.
  AgentActions actions{action::AbandonWorkers{}};
  exited_ = policy_.nproc;
  auto rest = on_all_exited();
  actions.insert(actions.end(), rest.begin(), rest.end());
  return actions;
}

AgentActions AgentStateMachine::on_worker_hung(const WorkerExit& killed, AgentClock::time_point now) {
  if (state_ != State::kRunning || killed.restart_count != restart_count_) return {};
  root_cause_ = killed;
  AgentActions actions{failure_known(killed)};
  if (policy_.coordinated) actions.push_back(action::PublishFailure{killed});
  auto stop = begin_stop(0, now);
  actions.insert(actions.end(), stop.begin(), stop.end());
  return actions;
}

AgentActions AgentStateMachine::on_all_exited() {
  AgentActions actions;
  if (state_ == State::kRunning) {  // every worker exited 0
    if (precheck_group_) {  // the verdict decides: on_precheck_verdict
      state_ = State::kWaiting;
      awaiting_verdict_ = true;
      actions.push_back(action::PrecheckDone{});
      return actions;
    }
    if (policy_.coordinated) {
      state_ = State::kWaiting;
      actions.push_back(action::PublishSuccess{});
      return actions;
    }
    state_ = State::kDone;
    actions.push_back(action::Exit{0});
    return actions;
  }
  actions.push_back(action::CancelStopTimer{});
  if (stop_signal_ != 0) {
    state_ = State::kDone;
    actions.push_back(action::Exit{kExitSignalBase + stop_signal_});
    return actions;
  }
  if (closing_code_) {
    // The close may overtake our own failure's stop (the coordinator acted on our report before
    // our workers were gone): this node still reports its root cause before it exits.
    report_decision(actions, /*restarting=*/false, *closing_code_ == kExitNoProgress);
    state_ = State::kDone;
    actions.push_back(action::Exit{*closing_code_});
    return actions;
  }
  if (!policy_.coordinated && requester_) {
    finish_request(actions);
    return actions;
  }
  if (policy_.coordinated) {
    // Only the coordinator decides restart or stop: a root cause is reported with its decision.
    if (round_ended_) {
      report_decision(actions, /*restarting=*/true);
      state_ = State::kJoining;
      actions.push_back(action::JoinRound{});
    } else {
      state_ = State::kWaiting;  // the coordinator will end the round or close the job
    }
    return actions;
  }
  const WorkerExit root = *root_cause_;
  const RestartDecision decision =
      decide_after_failure(restart_count_, policy_.max_restarts, root.crun_exit_code(), attempt_step_, progress_);
  actions.push_back(action::ReportFailure{root, decision.restart(), decision.no_progress()});
  if (decision.restart()) {
    state_ = State::kJoining;  // the round that follows has the next restart count
    actions.push_back(action::JoinRound{});
  } else {
    state_ = State::kDone;
    actions.push_back(action::Exit{decision.exit_code});
  }
  return actions;
}

AgentActions AgentStateMachine::on_precheck_verdict(bool proceed) {
  if (state_ != State::kWaiting || !awaiting_verdict_) return {};
  awaiting_verdict_ = false;
  if (proceed) return start_round();
  if (!policy_.coordinated) {  // one node is never slow; should it be, nothing can replace it
    state_ = State::kDone;
    return {action::Exit{kExitNodeUnhealthy}};
  }
  return {};  // kWaiting: the coordinator ends the round (the slow node's request) or closes the job
}

}  // namespace crun
