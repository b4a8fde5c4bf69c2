// AgentStateMachine with fake processes and a fake clock: events in, actions out.
#include <catch2/catch.hpp>
#include <csignal>

#include "agent/agent_state_machine.h"

using namespace crun;
using namespace std::chrono_literals;

namespace {

const AgentClock::time_point t0{};  // the fake clock: tests pick every time point

WorkerExit exit_of(int restart_count, int local_rank, int code, int sig = 0, AgentClock::duration at = 0ms) {
  WorkerExit e;
  e.restart_count = restart_count;
  e.local_rank = local_rank;
  e.pid = 1000 + local_rank;
  e.status = sig != 0 ? ExitStatus::killed(sig) : ExitStatus::exited(code);
  e.when = t0 + at;
  return e;
}

template <typename A>
const A* find(const AgentActions& actions) {
  for (const auto& a : actions) {
    if (auto* p = std::get_if<A>(&a)) return p;
  }
  return nullptr;
}

// start() joins a round; the round (restart count 0) starts the group.
void start(AgentStateMachine& sm) {
  const auto joined = sm.start(t0);
  REQUIRE(joined.size() == 1);
  REQUIRE(std::holds_alternative<action::JoinRound>(joined[0]));
  const auto started = sm.on_round(0);
  REQUIRE(started.size() == 1);
  REQUIRE(std::get<action::StartGroup>(started[0]).restart_count == 0);
}

}  // namespace

TEST_CASE("start joins a round, which starts the group with restart count 0", "[state_machine]") {
  AgentStateMachine sm({2, 0, 30s});
  const auto a = sm.start(t0);
  REQUIRE(a.size() == 1);
  REQUIRE(std::holds_alternative<action::JoinRound>(a[0]));
  REQUIRE(sm.state() == AgentStateMachine::State::kJoining);
  const auto b = sm.on_round(0);
  REQUIRE(b.size() == 1);
  REQUIRE(std::get<action::StartGroup>(b[0]).restart_count == 0);
  REQUIRE(sm.state() == AgentStateMachine::State::kRunning);
}

TEST_CASE("all workers succeed: exit 0", "[state_machine]") {
  AgentStateMachine sm({3, 2, 30s});
  start(sm);
  REQUIRE(sm.on_worker_exit(exit_of(0, 0, 0)).empty());
  REQUIRE(sm.on_worker_exit(exit_of(0, 2, 0)).empty());
  const auto a = sm.on_worker_exit(exit_of(0, 1, 0));
  REQUIRE(a.size() == 1);
  REQUIRE(std::get<action::Exit>(a[0]).code == 0);
  REQUIRE(sm.state() == AgentStateMachine::State::kDone);
}

TEST_CASE("a failure stops the group with SIGTERM and arms the grace timer", "[state_machine]") {
  AgentStateMachine sm({2, 0, 5s});
  start(sm);
  const auto a = sm.on_worker_exit(exit_of(0, 1, 3, 0, 100ms));
  REQUIRE(a.size() == 4);
  REQUIRE(std::get<action::FailureKnown>(a[0]).root_cause.local_rank == 1);
  REQUIRE(std::holds_alternative<action::CaptureStacks>(a[1]));  // the stacks before the signal
  REQUIRE(std::get<action::SignalGroup>(a[2]).signo == SIGTERM);
  REQUIRE(std::get<action::ArmStopTimer>(a[3]).deadline == t0 + 100ms + 5s);
  REQUIRE(sm.state() == AgentStateMachine::State::kStopping);
}

TEST_CASE("a hang, and the coordinator's end of a round, capture the stacks before the signal; a handled signal does not",
          "[state_machine]") {
  auto capture_then_signal = [](const AgentActions& a) {
    std::size_t capture = a.size(), signal = a.size();
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::holds_alternative<action::CaptureStacks>(a[i]) && capture == a.size()) capture = i;
      if (std::holds_alternative<action::SignalGroup>(a[i]) && signal == a.size()) signal = i;
    }
    return capture < signal && signal < a.size();
  };
  {
    AgentStateMachine sm({2, 0, 5s});
    start(sm);
    CHECK(capture_then_signal(sm.on_worker_hung(exit_of(0, 1, 0, SIGKILL), t0)));
  }
  {
    AgentStateMachine sm({2, 0, 5s, true});
    sm.start(t0);
    sm.on_round(0);
    CHECK(capture_then_signal(sm.on_round_ended(t0)));
  }
  {
    AgentStateMachine sm({2, 0, 5s});
    start(sm);
    const auto a = sm.on_signal(SIGTERM, t0);
    CHECK(find<action::CaptureStacks>(a) == nullptr);
  }
}

TEST_CASE("the root cause is known at the first failure, and whether it is the last, before the group stops",
          "[state_machine]") {
  AgentStateMachine sm({2, 1, 5s});
  start(sm);
  const auto first = sm.on_worker_exit(exit_of(0, 1, 3));
  REQUIRE(find<action::FailureKnown>(first) != nullptr);
  CHECK_FALSE(find<action::FailureKnown>(first)->last);  // a restart follows
  CHECK(find<action::FailureKnown>(sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM))) == nullptr);  // stopped by us
  sm.on_round(1);
  const auto second = sm.on_worker_exit(exit_of(1, 0, 4));
  REQUIRE(find<action::FailureKnown>(second) != nullptr);
  CHECK(find<action::FailureKnown>(second)->last);  // no restart left: known now, not at the group's end
  CHECK(find<action::FailureKnown>(second)->root_cause.status == ExitStatus::exited(4));
  CHECK(find<action::Exit>(second) == nullptr);  // rank 1 still stopping
  // Coordinated: the coordinator decides, so never the last from here.
  AgentStateMachine coordinated({1, 0, 5s, true});
  start(coordinated);
  const auto c = coordinated.on_worker_exit(exit_of(0, 0, 2));
  REQUIRE(find<action::FailureKnown>(c) != nullptr);
  CHECK_FALSE(find<action::FailureKnown>(c)->last);
}

TEST_CASE("restarts count up, then the root cause's code is the exit code", "[state_machine]") {
  AgentStateMachine sm({2, 2, 30s});
  start(sm);
  for (int restart = 0; restart <= 2; ++restart) {
    sm.on_worker_exit(exit_of(restart, 1, 7));
    const auto a = sm.on_worker_exit(exit_of(restart, 0, 0, SIGTERM));  // stopped by us
    REQUIRE(find<action::CancelStopTimer>(a) != nullptr);
    const auto* report = find<action::ReportFailure>(a);
    REQUIRE(report != nullptr);
    REQUIRE(report->root_cause.local_rank == 1);
    REQUIRE(report->root_cause.status == ExitStatus::exited(7));
    if (restart < 2) {
      REQUIRE(report->restarting);
      REQUIRE(find<action::StartGroup>(a) == nullptr);
      REQUIRE(find<action::JoinRound>(a) != nullptr);  // the next round has the next restart count
      REQUIRE(sm.state() == AgentStateMachine::State::kJoining);
      REQUIRE(find<action::StartGroup>(sm.on_round(restart + 1))->restart_count == restart + 1);
      REQUIRE(sm.restart_count() == restart + 1);
    } else {
      REQUIRE_FALSE(report->restarting);
      REQUIRE(find<action::StartGroup>(a) == nullptr);
      REQUIRE(find<action::Exit>(a)->code == 7);
    }
  }
}

TEST_CASE("root cause is the first failure, not the workers we stopped", "[state_machine]") {
  AgentStateMachine sm({4, 0, 30s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 2, 1, 0, 10ms));            // first failure: rank 2, code 1
  sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 11ms));      // stopped by us
  sm.on_worker_exit(exit_of(0, 3, 9, 0, 12ms));            // failed later (e.g. lost its peer)
  const auto a = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM, 13ms));
  REQUIRE(find<action::ReportFailure>(a)->root_cause.local_rank == 2);
  REQUIRE(find<action::Exit>(a)->code == 1);
}

TEST_CASE("a signal-killed root cause exits 128 + signal", "[state_machine]") {
  AgentStateMachine sm({1, 0, 30s});
  start(sm);
  const auto a = sm.on_worker_exit(exit_of(0, 0, 0, SIGSEGV));
  REQUIRE(find<action::Exit>(a)->code == 128 + SIGSEGV);
}

TEST_CASE("the grace period expires: SIGKILL once", "[state_machine]") {
  AgentStateMachine sm({2, 0, 1s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 1));
  const auto a = sm.on_stop_timeout(t0 + 1s);
  REQUIRE(a.size() == 2);
  REQUIRE(std::holds_alternative<action::KillGroup>(a[0]));
  REQUIRE(std::get<action::ArmStopTimer>(a[1]).deadline == t0 + 2s);  // how long SIGKILL may take
  const auto b = sm.on_worker_exit(exit_of(0, 1, 0, SIGKILL));
  REQUIRE(find<action::CancelStopTimer>(b));
  REQUIRE(find<action::Exit>(b)->code == 1);
  REQUIRE(sm.on_stop_timeout(t0 + 2s).empty());  // a stale expiry
}

TEST_CASE("a worker SIGKILL cannot end is left behind after the grace again", "[state_machine]") {
  AgentStateMachine sm({2, 1, 1s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 3));
  REQUIRE(find<action::KillGroup>(sm.on_stop_timeout(t0 + 1s)));
  // Local rank 1 sits in uninterruptible sleep: no exit comes.
  auto a = sm.on_stop_timeout(t0 + 2s);
  REQUIRE(std::holds_alternative<action::AbandonWorkers>(a.at(0)));
  REQUIRE(find<action::KillGroup>(a) == nullptr);
  const auto* report = find<action::ReportFailure>(a);
  REQUIRE(report);
  CHECK(report->root_cause.local_rank == 0);
  CHECK(report->restarting);
  REQUIRE(find<action::JoinRound>(a));
  // Its exit, should it come after all, belongs to a group that is over.
  REQUIRE(std::get<action::StartGroup>(sm.on_round(1).at(0)).restart_count == 1);
  REQUIRE(sm.on_worker_exit(exit_of(0, 1, 0, SIGKILL, 3s)).empty());
}

TEST_CASE("a handled signal is forwarded; crun exits 128 + signal, no restart", "[state_machine]") {
  AgentStateMachine sm({2, 5, 30s});
  start(sm);
  const auto a = sm.on_signal(SIGUSR1, t0);
  REQUIRE(std::get<action::SignalGroup>(a[0]).signo == SIGUSR1);
  REQUIRE(std::get<action::ArmStopTimer>(a[1]).deadline == t0 + 30s);
  sm.on_worker_exit(exit_of(0, 0, 0));
  const auto b = sm.on_worker_exit(exit_of(0, 1, 0, SIGUSR1));
  REQUIRE(find<action::StartGroup>(b) == nullptr);
  REQUIRE(find<action::ReportFailure>(b) == nullptr);
  REQUIRE(find<action::Exit>(b)->code == 128 + SIGUSR1);
}

TEST_CASE("a SIGTERM after a preemption notice is forwarded, but crun still exits 138", "[state_machine]") {
  AgentStateMachine sm({2, 5, 30s});
  start(sm);
  sm.on_signal(SIGUSR1, t0);
  const auto a = sm.on_signal(SIGTERM, t0 + 1ms);  // srun --kill-on-bad-exit, or the time limit
  REQUIRE(std::get<action::SignalGroup>(a[0]).signo == SIGTERM);
  sm.on_worker_exit(exit_of(0, 0, 0));
  const auto b = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM));
  REQUIRE(find<action::Exit>(b)->code == 128 + SIGUSR1);
}

TEST_CASE("a signal during a failure stop wins over restarting", "[state_machine]") {
  AgentStateMachine sm({2, 5, 30s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 1));
  const auto a = sm.on_signal(SIGINT, t0 + 1ms);
  REQUIRE(std::get<action::SignalGroup>(a[0]).signo == SIGINT);
  const auto b = sm.on_worker_exit(exit_of(0, 1, 0, SIGINT));
  REQUIRE(find<action::StartGroup>(b) == nullptr);
  REQUIRE(find<action::Exit>(b)->code == 128 + SIGINT);
}

TEST_CASE("exits from an earlier start of the group are ignored", "[state_machine]") {
  AgentStateMachine sm({1, 1, 30s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 2));  // -> the next round, restart 1
  sm.on_round(1);
  REQUIRE(sm.restart_count() == 1);
  REQUIRE(sm.on_worker_exit(exit_of(0, 0, 2)).empty());
  REQUIRE(find<action::Exit>(sm.on_worker_exit(exit_of(1, 0, 0)))->code == 0);
}

// --- Coordinated (multi-node) mode: the rendezvous decides restarts ---------------------------

namespace {
AgentStateMachine coordinated(int nproc, int max_restarts) {
  return AgentStateMachine(AgentPolicy{nproc, max_restarts, 5s, /*coordinated=*/true});
}
}  // namespace

TEST_CASE("coordinated: start joins, a round starts the group with its restart count", "[state_machine]") {
  auto sm = coordinated(2, 3);
  auto a = sm.start(t0);
  REQUIRE(a.size() == 1);
  REQUIRE(std::holds_alternative<action::JoinRound>(a[0]));
  REQUIRE(sm.state() == AgentStateMachine::State::kJoining);
  a = sm.on_round(2);
  REQUIRE(std::get<action::StartGroup>(a.at(0)).restart_count == 2);
  REQUIRE(sm.restart_count() == 2);
  REQUIRE(sm.on_round(3).empty());  // not joining any more
}

TEST_CASE("coordinated: a local failure is published at once, then the node waits", "[state_machine]") {
  auto sm = coordinated(2, 3);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_worker_exit(exit_of(0, 1, 9, 0, 10ms));
  REQUIRE(find<action::PublishFailure>(a) != nullptr);
  REQUIRE(find<action::PublishFailure>(a)->root_cause.status == ExitStatus::exited(9));
  REQUIRE(find<action::SignalGroup>(a)->signo == SIGTERM);
  a = sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 20ms));
  REQUIRE(find<action::ReportFailure>(a) == nullptr);  // reported with the coordinator's decision
  REQUIRE(find<action::JoinRound>(a) == nullptr);  // the coordinator decides
  REQUIRE(find<action::StartGroup>(a) == nullptr);
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
  a = sm.on_round_ended(t0 + 30ms);
  REQUIRE(a.size() == 2);
  REQUIRE(std::get<action::ReportFailure>(a[0]).root_cause.status == ExitStatus::exited(9));
  REQUIRE(std::get<action::ReportFailure>(a[0]).restarting);
  REQUIRE(std::holds_alternative<action::JoinRound>(a[1]));
}

TEST_CASE("coordinated: the coordinator's close, not this node's max_restarts, says no restart", "[state_machine]") {
  auto sm = coordinated(2, 3);  // restarts would remain by this node's count
  sm.start(t0);
  sm.on_round(0);
  sm.on_worker_exit(exit_of(0, 1, 9, 0, 10ms));
  REQUIRE(find<action::ReportFailure>(sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 20ms))) == nullptr);
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
  const auto a = sm.on_job_closed(9, t0 + 30ms);  // e.g. the job's restarts were used up elsewhere
  REQUIRE(a.size() == 2);
  REQUIRE_FALSE(std::get<action::ReportFailure>(a[0]).restarting);
  REQUIRE(std::get<action::Exit>(a[1]).code == 9);
  REQUIRE(sm.on_job_closed(9, t0 + 40ms).empty());
}

TEST_CASE("coordinated: a round the coordinator ended restarts though this node's max_restarts is 0", "[state_machine]") {
  auto sm = coordinated(2, 0);
  sm.start(t0);
  sm.on_round(0);
  sm.on_worker_exit(exit_of(0, 1, 9, 0, 10ms));
  REQUIRE(sm.on_round_ended(t0 + 15ms).empty());  // the stop decision overtook our workers' exits
  auto a = sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 20ms));
  REQUIRE(find<action::ReportFailure>(a) != nullptr);
  REQUIRE(find<action::ReportFailure>(a)->restarting);
  REQUIRE(find<action::JoinRound>(a) != nullptr);
  a = sm.on_round(1);
  REQUIRE(std::get<action::StartGroup>(a.at(0)).restart_count == 1);
  // The next round's failure is reported again, once, with its own decision.
  sm.on_worker_exit(exit_of(1, 0, 4, 0, 30ms));
  REQUIRE(find<action::ReportFailure>(sm.on_worker_exit(exit_of(1, 1, 0, SIGTERM, 40ms))) == nullptr);
  a = sm.on_job_closed(4, t0 + 50ms);
  REQUIRE(std::get<action::ReportFailure>(a.at(0)).root_cause.status == ExitStatus::exited(4));
  REQUIRE_FALSE(std::get<action::ReportFailure>(a.at(0)).restarting);
}

TEST_CASE("coordinated: a signal while waiting for the decision reports the failure without a restart", "[state_machine]") {
  auto sm = coordinated(1, 3);
  sm.start(t0);
  sm.on_round(0);
  sm.on_worker_exit(exit_of(0, 0, 5, 0, 10ms));
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
  const auto a = sm.on_signal(SIGTERM, t0 + 20ms);
  REQUIRE(a.size() == 2);
  REQUIRE_FALSE(std::get<action::ReportFailure>(a[0]).restarting);
  REQUIRE(std::get<action::Exit>(a[1]).code == 128 + SIGTERM);
}

TEST_CASE("coordinated: a round ended elsewhere stops the workers, then rejoins", "[state_machine]") {
  auto sm = coordinated(2, 0);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_round_ended(t0 + 1s);
  REQUIRE(find<action::SignalGroup>(a)->signo == SIGTERM);
  REQUIRE(find<action::ArmStopTimer>(a)->deadline == t0 + 1s + 5s);
  REQUIRE(sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM)).empty());
  a = sm.on_worker_exit(exit_of(0, 1, 143));  // stopped by us: never a root cause
  REQUIRE(find<action::ReportFailure>(a) == nullptr);
  REQUIRE(find<action::PublishFailure>(a) == nullptr);
  REQUIRE(find<action::JoinRound>(a) != nullptr);
  REQUIRE(sm.state() == AgentStateMachine::State::kJoining);
}

TEST_CASE("coordinated: success is published and the job's close decides the exit", "[state_machine]") {
  auto sm = coordinated(2, 0);
  sm.start(t0);
  sm.on_round(0);
  sm.on_worker_exit(exit_of(0, 0, 0));
  auto a = sm.on_worker_exit(exit_of(0, 1, 0));
  REQUIRE(a.size() == 1);
  REQUIRE(std::holds_alternative<action::PublishSuccess>(a[0]));
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
  a = sm.on_job_closed(0, t0);
  REQUIRE(std::get<action::Exit>(a.at(0)).code == 0);
}

TEST_CASE("coordinated: a close while running stops the workers and exits with its code", "[state_machine]") {
  auto sm = coordinated(1, 0);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_job_closed(42, t0);
  REQUIRE(find<action::SignalGroup>(a) != nullptr);
  a = sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM));
  REQUIRE(std::get<action::Exit>(a.back()).code == 42);
  REQUIRE(sm.state() == AgentStateMachine::State::kDone);
}

TEST_CASE("coordinated: a signal while joining or waiting exits at once", "[state_machine]") {
  auto sm = coordinated(1, 0);
  sm.start(t0);
  auto a = sm.on_signal(SIGTERM, t0);
  REQUIRE(std::get<action::Exit>(a.at(0)).code == 128 + SIGTERM);
  auto sm2 = coordinated(1, 0);
  sm2.start(t0);
  sm2.on_round(0);
  sm2.on_worker_exit(exit_of(0, 0, 0));
  REQUIRE(sm2.state() == AgentStateMachine::State::kWaiting);
  a = sm2.on_signal(SIGINT, t0);
  REQUIRE(std::get<action::Exit>(a.at(0)).code == 128 + SIGINT);
}

TEST_CASE("coordinated: a close that overtakes the stop of a local failure still reports it", "[state_machine]") {
  auto sm = coordinated(2, 0);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_worker_exit(exit_of(0, 1, 0, SIGKILL, 10ms));
  REQUIRE(find<action::PublishFailure>(a) != nullptr);
  REQUIRE(sm.on_job_closed(128 + SIGKILL, t0 + 20ms).empty());  // our report closed the job
  a = sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 30ms));
  REQUIRE(find<action::ReportFailure>(a) != nullptr);
  CHECK(find<action::ReportFailure>(a)->root_cause.status == ExitStatus::killed(SIGKILL));
  CHECK_FALSE(find<action::ReportFailure>(a)->restarting);
  REQUIRE(std::get<action::Exit>(a.back()).code == 128 + SIGKILL);
}

TEST_CASE("a hung worker is the root cause even when its peers' exits arrive first", "[state_machine]") {
  AgentStateMachine sm({3, 1, 30s});
  start(sm);
  auto a = sm.on_worker_hung(exit_of(0, 2, 0, SIGKILL, 5s), t0 + 5s);
  REQUIRE(find<action::SignalGroup>(a)->signo == SIGTERM);
  REQUIRE(find<action::ArmStopTimer>(a)->deadline == t0 + 35s);
  REQUIRE(find<action::PublishFailure>(a) == nullptr);  // single node: nothing to publish
  REQUIRE(sm.state() == AgentStateMachine::State::kStopping);
  REQUIRE(sm.on_worker_hung(exit_of(0, 1, 0, SIGKILL, 5s), t0 + 5s).empty());  // one stop at a time
  REQUIRE(sm.on_worker_hung(exit_of(7, 1, 0, SIGKILL, 5s), t0 + 5s).empty());  // another group's
  // A peer's collective fails the moment the hung rank is killed; it is reaped first.
  REQUIRE(find<action::ReportFailure>(sm.on_worker_exit(exit_of(0, 0, 1, 0, 5001ms))) == nullptr);
  REQUIRE(find<action::ReportFailure>(sm.on_worker_exit(exit_of(0, 2, 0, SIGKILL, 5002ms))) == nullptr);
  a = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM, 5003ms));
  const auto* report = find<action::ReportFailure>(a);
  REQUIRE(report);
  CHECK(report->root_cause.local_rank == 2);
  CHECK(report->root_cause.status == ExitStatus::killed(SIGKILL));
  CHECK(report->restarting);
  REQUIRE(find<action::JoinRound>(a));
  // The next round starts afresh.
  REQUIRE(std::get<action::StartGroup>(sm.on_round(1).at(0)).restart_count == 1);
  a = sm.on_worker_exit(exit_of(1, 0, 4, 0, 6s));
  sm.on_worker_exit(exit_of(1, 1, 0, SIGTERM, 6s));
  a = sm.on_worker_exit(exit_of(1, 2, 0, SIGTERM, 6s));
  REQUIRE(find<action::ReportFailure>(a)->root_cause.local_rank == 0);
  REQUIRE(find<action::Exit>(a)->code == 4);
}

TEST_CASE("coordinated: a hung worker is published before it is killed", "[state_machine]") {
  auto sm = coordinated(2, 3);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_worker_hung(exit_of(0, 0, 0, SIGKILL, 1s), t0 + 1s);
  REQUIRE(find<action::PublishFailure>(a));
  CHECK(find<action::PublishFailure>(a)->root_cause.local_rank == 0);
  REQUIRE(find<action::SignalGroup>(a));
  // Its peer fails on its death, then it is reaped: neither is published again.
  REQUIRE(find<action::PublishFailure>(sm.on_worker_exit(exit_of(0, 1, 1, 0, 1001ms))) == nullptr);
  REQUIRE(find<action::PublishFailure>(sm.on_worker_exit(exit_of(0, 0, 0, SIGKILL, 1002ms))) == nullptr);
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
}

TEST_CASE("restarts that make no progress stop the job with kExitNoProgress", "[state_machine]") {
  AgentStateMachine sm({2, 10, 30s, false, /*no_progress_limit=*/2});
  start(sm);
  auto fail_at = [&](int restart, std::int64_t step) {
    sm.record_step(step);
    sm.on_worker_exit(exit_of(restart, 1, 13));
    return sm.on_worker_exit(exit_of(restart, 0, 0, SIGTERM));
  };
  auto a = fail_at(0, 120);  // progress: the first steps seen
  REQUIRE(find<action::JoinRound>(a));
  sm.on_round(1);
  a = fail_at(1, 119);
  REQUIRE(find<action::JoinRound>(a));
  REQUIRE(find<action::ReportFailure>(a)->restarting);
  sm.on_round(2);
  a = fail_at(2, 120);  // not beyond 120: two restarts in a row without progress
  const auto* report = find<action::ReportFailure>(a);
  REQUIRE(report);
  CHECK_FALSE(report->restarting);
  CHECK(report->no_progress);
  REQUIRE(find<action::Exit>(a));
  CHECK(find<action::Exit>(a)->code == kExitNoProgress);
  CHECK(find<action::JoinRound>(a) == nullptr);
}

TEST_CASE("progress resets the count; restarts running out is not a no-progress stop", "[state_machine]") {
  AgentStateMachine sm({1, 2, 30s, false, /*no_progress_limit=*/2});
  start(sm);
  sm.record_step(10);
  REQUIRE(find<action::JoinRound>(sm.on_worker_exit(exit_of(0, 0, 1))));
  sm.on_round(1);
  sm.record_step(10);
  REQUIRE(find<action::JoinRound>(sm.on_worker_exit(exit_of(1, 0, 1))));
  sm.on_round(2);
  sm.record_step(11);  // the last restart: no restarts left, whatever the steps
  auto a = sm.on_worker_exit(exit_of(2, 0, 1));
  CHECK_FALSE(find<action::ReportFailure>(a)->no_progress);
  CHECK(find<action::Exit>(a)->code == 1);
}

TEST_CASE("coordinated: a close for no progress is reported as such", "[state_machine]") {
  auto sm = coordinated(1, 5);
  sm.start(t0);
  sm.on_round(0);
  sm.on_worker_exit(exit_of(0, 0, 1, 0, 10ms));
  auto a = sm.on_job_closed(kExitNoProgress, t0 + 20ms);
  REQUIRE(find<action::ReportFailure>(a));
  CHECK(find<action::ReportFailure>(a)->no_progress);
  CHECK(find<action::Exit>(a)->code == kExitNoProgress);
}

// A worker's request through CRUN_CONTROL_FILE, carried by its exit.
namespace {
WorkerExit requesting(int restart_count, int local_rank, int code, WorkerRequest::Kind kind, const std::string& reason,
                      AgentClock::duration at = 0ms) {
  WorkerExit e = exit_of(restart_count, local_rank, code, 0, at);
  e.request = WorkerRequest{kind, reason};
  return e;
}
constexpr auto kStop = WorkerRequest::Kind::kStopJob;
constexpr auto kExclude = WorkerRequest::Kind::kExcludeNode;
}  // namespace

TEST_CASE("requests: stop-job ends the group with no restart and crun exits with the rank's code", "[state_machine]") {
  AgentStateMachine sm({2, 3, 30s});
  start(sm);
  auto a = sm.on_worker_exit(requesting(0, 1, 7, kStop, "data corrupt", 5ms));
  REQUIRE(find<action::FailureKnown>(a));
  CHECK(find<action::FailureKnown>(a)->last);  // no restart follows, whatever --max-restarts leaves
  CHECK(find<action::SignalGroup>(a)->signo == SIGTERM);
  CHECK(find<action::PublishFailure>(a) == nullptr);
  a = sm.on_worker_exit(exit_of(0, 0, 0, SIGTERM, 10ms));  // stopped by us
  REQUIRE(find<action::ReportFailure>(a));
  CHECK(find<action::ReportFailure>(a)->root_cause.local_rank == 1);
  CHECK(find<action::ReportFailure>(a)->root_cause.request->reason == "data corrupt");
  CHECK_FALSE(find<action::ReportFailure>(a)->restarting);
  CHECK(find<action::Exit>(a)->code == 7);
  CHECK(find<action::JoinRound>(a) == nullptr);
  CHECK(sm.state() == AgentStateMachine::State::kDone);
}

TEST_CASE("requests: stop-job from an exit 0 stops the others and exits 0, with no failure", "[state_machine]") {
  AgentStateMachine sm({2, 3, 30s});
  start(sm);
  auto a = sm.on_worker_exit(requesting(0, 0, 0, kStop, "converged"));
  CHECK(find<action::FailureKnown>(a) == nullptr);
  CHECK(find<action::SignalGroup>(a));
  a = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM, 10ms));
  CHECK(find<action::ReportFailure>(a) == nullptr);
  CHECK(find<action::Exit>(a)->code == 0);
}

TEST_CASE("requests: exclude-node on one node exits kExitNodeUnhealthy, exit 0 included", "[state_machine]") {
  for (int code : {0, 4}) {
    AgentStateMachine sm({2, 3, 30s});
    start(sm);
    auto a = sm.on_worker_exit(requesting(0, 0, code, kExclude, "XID 79"));
    REQUIRE(find<action::FailureKnown>(a));  // the node is bad: a failure, whatever the code
    CHECK(find<action::FailureKnown>(a)->last);
    a = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM, 10ms));
    REQUIRE(find<action::ReportFailure>(a));
    CHECK(find<action::ReportFailure>(a)->root_cause.request->kind == kExclude);
    CHECK(find<action::Exit>(a)->code == kExitNodeUnhealthy);
  }
}

TEST_CASE("requests: while stopping for a failure, a request still decides, and a stop-job outranks an exclude-node",
          "[state_machine]") {
  AgentStateMachine sm({3, 3, 30s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 1, 0, 1ms));  // the first failure: restarts remain
  sm.on_worker_exit(requesting(0, 1, 5, kExclude, "bad NIC", 2ms));
  auto a = sm.on_worker_exit(requesting(0, 2, 6, kStop, "give up", 3ms));
  REQUIRE(find<action::ReportFailure>(a));
  CHECK(find<action::ReportFailure>(a)->root_cause.local_rank == 2);
  CHECK(find<action::Exit>(a)->code == 6);
}

TEST_CASE("requests: a stop-job from an exit 0 after another rank failed keeps that failure's code", "[state_machine]") {
  AgentStateMachine sm({2, 3, 30s});
  start(sm);
  sm.on_worker_exit(exit_of(0, 0, 3, 0, 1ms));
  auto a = sm.on_worker_exit(requesting(0, 1, 0, kStop, "stop", 2ms));
  REQUIRE(find<action::ReportFailure>(a));
  CHECK(find<action::ReportFailure>(a)->root_cause.local_rank == 0);
  CHECK(find<action::Exit>(a)->code == 3);  // a failure never becomes a success
}

TEST_CASE("requests: a group stopped by a signal exits for the signal, requests or not", "[state_machine]") {
  AgentStateMachine sm({1, 3, 30s});
  start(sm);
  sm.on_signal(SIGTERM, t0);
  auto a = sm.on_worker_exit(requesting(0, 0, 0, kExclude, "late"));
  CHECK(find<action::Exit>(a)->code == 128 + SIGTERM);
}

TEST_CASE("requests: the next group starts with none (requests are per start)", "[state_machine]") {
  AgentStateMachine sm({1, 3, 30s});
  start(sm);
  auto a = sm.on_worker_exit(exit_of(0, 0, 1));
  REQUIRE(find<action::JoinRound>(a));
  sm.on_round(1);
  a = sm.on_worker_exit(exit_of(1, 0, 1));  // an ordinary failure: restarts as usual
  CHECK(find<action::JoinRound>(a));
}

TEST_CASE("requests, coordinated: published at once with the request; late ones are not acted on", "[state_machine]") {
  auto sm = coordinated(2, 3);
  sm.start(t0);
  sm.on_round(0);
  auto a = sm.on_worker_exit(requesting(0, 1, 0, kExclude, "XID 79"));
  REQUIRE(find<action::PublishFailure>(a));
  CHECK(find<action::PublishFailure>(a)->root_cause.request->reason == "XID 79");
  CHECK_FALSE(find<action::FailureKnown>(a)->last);  // the coordinator decides
  a = sm.on_worker_exit(requesting(0, 0, 2, kStop, "too late", 5ms));
  CHECK(find<action::PublishFailure>(a) == nullptr);
  CHECK(sm.state() == AgentStateMachine::State::kWaiting);
  a = sm.on_round_ended(t0 + 10ms);  // restart without this node is the coordinator's to arrange
  REQUIRE(find<action::ReportFailure>(a));
  CHECK(find<action::ReportFailure>(a)->root_cause.local_rank == 1);
  CHECK(find<action::JoinRound>(a));

  auto stop = coordinated(1, 3);
  stop.start(t0);
  stop.on_round(0);
  a = stop.on_worker_exit(requesting(0, 0, 0, kStop, "converged"));
  REQUIRE(find<action::PublishFailure>(a));  // the coordinator closes the job with the code, 0
  CHECK(find<action::PublishFailure>(a)->root_cause.crun_exit_code() == 0);
  CHECK(find<action::FailureKnown>(a) == nullptr);
  a = stop.on_job_closed(0, t0 + 5ms);
  CHECK(find<action::Exit>(a)->code == 0);
}

// --precheck: the first start runs crun-precheck; its verdict decides what follows.
namespace {

AgentPolicy precheck_policy(bool coordinated) {
  AgentPolicy p{2, 3, 30s, coordinated};
  p.precheck = true;
  return p;
}

// start() and the first round: the pre-flight check starts.
void start_precheck(AgentStateMachine& sm) {
  sm.start(t0);
  const auto started = sm.on_round(0);
  REQUIRE(started.size() == 1);
  REQUIRE(std::get<action::StartGroup>(started[0]).precheck);
}

}  // namespace

TEST_CASE("precheck: all exit 0 and no slow node: the workers start in the same round", "[state_machine]") {
  for (bool coordinated : {false, true}) {
    AgentStateMachine sm(precheck_policy(coordinated));
    start_precheck(sm);
    REQUIRE(sm.on_worker_exit(exit_of(0, 1, 0)).empty());
    const auto done = sm.on_worker_exit(exit_of(0, 0, 0));
    REQUIRE(done.size() == 1);
    REQUIRE(std::holds_alternative<action::PrecheckDone>(done[0]));  // no PublishSuccess
    const auto go = sm.on_precheck_verdict(true);
    REQUIRE(go.size() == 1);
    REQUIRE(std::get<action::StartGroup>(go[0]).restart_count == 0);
    REQUIRE_FALSE(std::get<action::StartGroup>(go[0]).precheck);
    REQUIRE(sm.state() == AgentStateMachine::State::kRunning);
    sm.on_worker_exit(exit_of(0, 0, 0));
    const auto end = sm.on_worker_exit(exit_of(0, 1, 0));
    REQUIRE((coordinated ? find<action::PublishSuccess>(end) != nullptr : find<action::Exit>(end)->code == 0));
  }
}

TEST_CASE("precheck: another node slow: wait for the round's end, then the workers, never the precheck again",
          "[state_machine]") {
  AgentStateMachine sm(precheck_policy(true));
  start_precheck(sm);
  sm.on_worker_exit(exit_of(0, 0, 0));
  REQUIRE(find<action::PrecheckDone>(sm.on_worker_exit(exit_of(0, 1, 0))));
  REQUIRE(sm.on_precheck_verdict(false).empty());
  REQUIRE(sm.state() == AgentStateMachine::State::kWaiting);
  const auto ended = sm.on_round_ended(t0);
  REQUIRE(ended.size() == 1);  // nothing failed here: no report
  REQUIRE(std::holds_alternative<action::JoinRound>(ended[0]));
  const auto next = sm.on_round(1);
  REQUIRE(std::get<action::StartGroup>(next[0]).restart_count == 1);
  REQUIRE_FALSE(std::get<action::StartGroup>(next[0]).precheck);
}

TEST_CASE("precheck: the slow node's own request publishes a failure", "[state_machine]") {
  AgentStateMachine sm(precheck_policy(true));
  start_precheck(sm);
  sm.on_worker_exit(exit_of(0, 1, 0));
  WorkerExit slow = exit_of(0, 0, 0);
  slow.request = WorkerRequest{WorkerRequest::Kind::kExcludeNode, "precheck: 3x the median (0.9 s vs 0.3 s)"};
  const auto a = sm.on_worker_exit(slow);
  REQUIRE(find<action::PublishFailure>(a) != nullptr);
  REQUIRE(find<action::PrecheckDone>(a) == nullptr);
  // No node to replace it: the coordinator closes the job with 9.
  const auto closed = sm.on_job_closed(kExitNodeUnhealthy, t0);
  REQUIRE(find<action::ReportFailure>(closed) != nullptr);
  REQUIRE(find<action::Exit>(closed)->code == kExitNodeUnhealthy);
}

TEST_CASE("precheck: a failing precheck is an ordinary failure; the restart runs the workers", "[state_machine]") {
  AgentStateMachine sm(precheck_policy(false));
  start_precheck(sm);
  sm.on_worker_exit(exit_of(0, 0, 1));
  const auto a = sm.on_worker_exit(exit_of(0, 1, 0, SIGTERM));
  REQUIRE(find<action::ReportFailure>(a)->restarting);
  REQUIRE(find<action::JoinRound>(a));
  const auto next = sm.on_round(1);
  REQUIRE_FALSE(std::get<action::StartGroup>(next[0]).precheck);
}

TEST_CASE("precheck: off by default, and a stale verdict changes nothing", "[state_machine]") {
  AgentStateMachine sm({2, 0, 30s});
  start(sm);
  REQUIRE(sm.on_precheck_verdict(true).empty());
}

TEST_CASE("precheck: a node whose first round is not the job's first starts its workers at once", "[state_machine]") {
  AgentStateMachine sm(precheck_policy(true));
  sm.start(t0);
  sm.forgo_precheck();
  const auto started = sm.on_round(1);
  REQUIRE_FALSE(std::get<action::StartGroup>(started[0]).precheck);
}
