// agent/exit_status: one process's end and its encodings (crun's exit code, torch's exitcode,
// the report's words), read from waitid() results.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "agent/exit_status.h"

using namespace crun;

namespace {

// Forks a child that ends as `run` makes it, and returns what waitid() says about it.
template <typename Run>
siginfo_t end_of_child(Run run) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    run();
    ::_exit(99);
  }
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int rc;
  while ((rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED)) != 0 && errno == EINTR) {
  }
  REQUIRE(rc == 0);
  return info;
}

}  // namespace

TEST_CASE("an exit code keeps its value in every encoding", "[exit_status]") {
  const auto s = ExitStatus::exited(3);
  CHECK(s.failed());
  CHECK_FALSE(s.signaled());
  CHECK(s.exit_code() == 3);
  CHECK(s.signal() == 0);
  CHECK(s.crun_exit_code() == 3);
  CHECK(s.torch_exitcode() == 3);
  CHECK(s.describe() == "exit code 3");

  CHECK_FALSE(ExitStatus().failed());
  CHECK(ExitStatus() == ExitStatus::exited(0));
  CHECK(ExitStatus().torch_exitcode() == 0);
}

TEST_CASE("a signal is 128 + N for crun, -N for torch, its name in words", "[exit_status]") {
  const auto s = ExitStatus::killed(SIGKILL);
  CHECK(s.failed());
  CHECK(s.signaled());
  CHECK(s.exit_code() == 0);
  CHECK(s.signal() == SIGKILL);
  CHECK(s.crun_exit_code() == 137);
  CHECK(s.torch_exitcode() == -9);
  CHECK(s.describe() == "killed by SIGKILL");
  CHECK(ExitStatus::killed(SIGRTMIN + 1).describe() == "killed by SIG" + std::to_string(SIGRTMIN + 1));
}

TEST_CASE("crun's exit code reads back, given whether a signal ended it", "[exit_status]") {
  CHECK(ExitStatus::from_crun_exit_code(3, false) == ExitStatus::exited(3));
  CHECK(ExitStatus::from_crun_exit_code(137, false) == ExitStatus::exited(137));
  CHECK(ExitStatus::from_crun_exit_code(137, true) == ExitStatus::killed(SIGKILL));
  CHECK(ExitStatus::from_crun_exit_code(128, true) == std::nullopt);
  CHECK(ExitStatus::from_crun_exit_code(3, true) == std::nullopt);
  for (auto s : {ExitStatus::exited(0), ExitStatus::exited(255), ExitStatus::killed(SIGSEGV)}) {
    CHECK(ExitStatus::from_crun_exit_code(s.crun_exit_code(), s.signaled()) == s);
  }
}

TEST_CASE("waitid's report of a real child: an exit, a kill", "[exit_status]") {
  CHECK(ExitStatus::from_siginfo(end_of_child([] { ::_exit(42); })) == ExitStatus::exited(42));
  CHECK(ExitStatus::from_siginfo(end_of_child([] { ::raise(SIGKILL); })) == ExitStatus::killed(SIGKILL));
}

TEST_CASE("a core dump is the signal that caused it", "[exit_status]") {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  info.si_code = CLD_DUMPED;  // made by hand: a real dump would leave a core file behind
  info.si_status = SIGSEGV;
  CHECK(ExitStatus::from_siginfo(info) == ExitStatus::killed(SIGSEGV));
}
