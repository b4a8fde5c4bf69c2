// ExitStatus: how a process ended (its exit code, or the signal that killed it), and each of the
// encodings crun gives that, in one place.
//
// Contract
//   - from_siginfo() reads a waitid() result: CLD_EXITED is an exit code, anything else (killed,
//     dumped) the signal in si_status.
//   - crun_exit_code(): the exit code, or 128 + N when signal N killed it (base/exit_codes.h):
//     what crun exits with for its root cause, what a node publishes as its failure, and the
//     failure report's "exit_code". from_crun_exit_code() reads that back.
//   - torch_exitcode(): the exit code, or -N: torchrun's encoding (the errorCode crun writes into
//     the error file it copies for the launcher).
//   - describe(): the failure report's words, "exit code 3" or "killed by SIGKILL"
//     (signal_names.h; "SIG<n>" for a signal without a name).
//   - The default value is a clean exit (code 0).
//
// Threading
//   Value type; safe from any thread.
#pragma once

#include <signal.h>

#include <optional>
#include <string>

namespace crun {

class ExitStatus {
 public:
  ExitStatus() = default;
  static ExitStatus exited(int code) { return ExitStatus(code, 0); }
  static ExitStatus killed(int signo) { return ExitStatus(0, signo); }
  static ExitStatus from_siginfo(const siginfo_t& info);
  // `by_signal`: a signal ended it (the report's "signal" is not null); nullopt when the code is
  // then not above 128.
  static std::optional<ExitStatus> from_crun_exit_code(int code, bool by_signal);

  bool signaled() const { return signal_ != 0; }
  int exit_code() const { return code_; }  // 0 when killed by a signal
  int signal() const { return signal_; }   // 0 when it exited
  bool failed() const { return signal_ != 0 || code_ != 0; }

  int crun_exit_code() const;
  int torch_exitcode() const { return signal_ != 0 ? -signal_ : code_; }
  std::string describe() const;

  bool operator==(const ExitStatus&) const = default;

 private:
  ExitStatus(int code, int signo) : code_(code), signal_(signo) {}
  int code_ = 0;
  int signal_ = 0;
};

}  // namespace crun
