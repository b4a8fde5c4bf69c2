// The keeper process (keeper.h starts it): what it does, in a program of its own.
//
// Contract
//   - `<program> --crun-keeper <cgroup dir or ""> CRUN_AGENT_ID=<id>`, with the read end of the
//     agent's pipe at descriptor 3, is the keeper; nothing else is (a wrong marker prefix, or no
//     pipe at 3, and run_keeper() returns 2 at once: no command line typed by hand turns it into
//     a process killer).
//   - It reads the agent's messages (one int each: a worker's pid = its process group; 0: the
//     group is over, forget the pids; -1: the agent ends normally) until end-of-file, then:
//       after -1 (normal end): removes the cgroup, if any (killing any straggler first);
//       without it (the agent died, SIGKILL included): with the cgroup, cgroup.kill, wait until it
//       is empty (at most 10 s), rmdir; then (with or without one) SIGKILL to every process group
//       it was told of, then to every process whose environment holds the marker, scanning /proc
//       again until a scan finds none (at most 50 scans, 10 s).
//     and exits 0. What it cannot clean up it reports on stderr ("crun-keeper: ...").
//   - Two programs run it: crun-keeper, a small static program beside crun (launcher/), and,
//     where that is missing, any program that links the agent, through a constructor of
//     keeper_process.cc (glibc passes argv to constructors), before main() and the program's
//     own initialisation. keeper_program() says which; calling it links this file, hence that
//     constructor, into the program. A command line whose first argument is --crun-keeper never
//     reaches main(): it is the keeper, or it exits 2.
//   - Plain system calls only, no allocation; names itself crun-keeper (PR_SET_NAME).
//
// Threading
//   A process of its own, one thread.
#pragma once

#include <string>

namespace crun {

inline constexpr char kKeeperFlag[] = "--crun-keeper";
inline constexpr char kKeeperMarkerPrefix[] = "CRUN_AGENT_ID=";
inline constexpr int kKeeperPipeFd = 3;
// Messages on the pipe besides a worker's pid.
inline constexpr int kKeeperGroupOver = 0;
inline constexpr int kKeeperFinish = -1;

// Runs the keeper when argv asks for it (never returns then); otherwise returns 2.
int run_keeper(int argc, char** argv);

// The program to start as the keeper: crun-keeper beside this program's executable, else
// /proc/self/exe.
std::string keeper_program();

}  // namespace crun
