#include "agent/exit_status.h"

#include "agent/signal_names.h"
#include "base/exit_codes.h"

namespace crun {

ExitStatus ExitStatus::from_siginfo(const siginfo_t& info) {
  return info.si_code == CLD_EXITED ? exited(info.si_status) : killed(info.si_status);
}

std::optional<ExitStatus> ExitStatus::from_crun_exit_code(int code, bool by_signal) {
  if (!by_signal) return exited(code);
  if (code - kExitSignalBase <= 0) return std::nullopt;
  return killed(code - kExitSignalBase);
}

int ExitStatus::crun_exit_code() const { return signal_ != 0 ? kExitSignalBase + signal_ : code_; }

std::string ExitStatus::describe() const {
  if (signal_ != 0) return "killed by " + signal_name(signal_);
  return "exit code " + std::to_string(code_);
}

}  // namespace crun
