// Python stacks: how crun arranges for every Python worker to dump all its threads' Python stacks
// on a signal, without the program doing anything (docs/operations.md, "Stacks before the kill";
// docs/decisions.md, "Python stacks through usercustomize").
//
// Contract
//   - arrange_python_stacks(env, dir, signo): writes DIR/usercustomize.py and sets, in `env` (the
//     workers' environment, "KEY=VALUE"), CRUN_PYTHON_STACKS=SIGNO:DIR and PYTHONPATH=DIR, before
//     the value PYTHONPATH had (joined by ':'). At the interpreter's start site imports
//     usercustomize: ours opens DIR/<pid>.tmp for appending (on a descriptor >= 1000,
//     close-on-exec: the program's own opens get the numbers a plain start gives), registers
//     faulthandler on SIGNO for it (all_threads, not chained), renames it to DIR/<pid> (its existence says the signal is
//     safe to send), then takes DIR out of sys.path, CRUN_PYTHON_STACKS out of os.environ and
//     PYTHONPATH back to what it was,
//     and runs a usercustomize further on sys.path, if there is one, as site would have. The
//     standby bootstrap (agent/standby_bootstrap.py) does both again after it applies the round's
//     environment. Returns "" or why not (DIR cannot be written, or holds ':').
//   - python_dump_file(dir, pid): DIR/<pid>.
//   - python_stacks_signal(): SIGRTMIN + 6 (glibc keeps the first two; crun sends no other, nor
//     does torch 1.13; docs/decisions.md, "Python stacks through usercustomize").
//   - Python workers started with -I, -s or -E, PYTHONNOUSERSITE, or a set-uid interpreter never
//     import it: their stacks are native only.
//
// Threading
//   Plain functions; any thread.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace crun {

int python_stacks_signal();
std::string arrange_python_stacks(std::vector<std::string>& env, const std::filesystem::path& dir, int signo);
std::string python_dump_file(const std::filesystem::path& dir, int pid);

}  // namespace crun
