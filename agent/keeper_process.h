// The keeper process (keeper.h starts it): what it does, as a child sharing the agent's memory or
// in a program of its own.
//
// Contract
//   - keeper_main(job) is the keeper: `job` holds all it works from (the cgroup, the marker, the
//     run directory, the process groups it was told of) and lies in memory the agent never
//     touches again; the read end of the agent's pipe is at descriptor 3. keeper.h calls it in a
//     child that shares the agent's memory; run_keeper() in a program of its own.
//   - `<program> --crun-keeper <cgroup dir or ""> CRUN_AGENT_ID=<id> <run dir or "">`, with the
//     read end of the agent's pipe at descriptor 3, is the keeper; nothing else is (a wrong
//     marker prefix, or no pipe at 3, and run_keeper() returns 2 at once: no command line typed
//     by hand turns it into a process killer).
//   - It reads the agent's messages (one int each: a worker's pid = its process group; 0: the
//     group is over, forget the pids; -1: the agent ends normally; a keeper sharing the agent's
//     memory gets none: the agent applies them to its job, apply_keeper_message) until
//     end-of-file, then:
//       after -1 (normal end): removes the cgroup, if any (killing any straggler first);
//       without it (the agent died, SIGKILL included): with the cgroup, cgroup.kill, wait until it
//       is empty (at most 10 s), rmdir; then (with or without one) SIGKILL to every process group
//       it was told of, then to every process whose environment holds the marker, scanning /proc
//       again until a scan finds none (at most 50 scans, 10 s); last, the run directory, if it
//       was given one (the agent's temporary one: error files, heartbeats; never one that holds
//       logs), with all it holds (base/remove_tree.h: no symbolic link followed);
//     and exits 0. What it cannot clean up it reports on stderr ("crun-keeper: ...").
//   - Two programs run it: crun-keeper, a small static program beside crun (launcher/), and,
//     where that is missing, any program that links the agent, through a constructor of
//     keeper_process.cc (glibc passes argv to constructors), before main() and the program's
//     own initialisation. keeper_program() says which; calling it links this file, hence that
//     constructor, into the program. A command line whose first argument is --crun-keeper never
//     reaches main(): it is the keeper, or it exits 2.
//   - Raw system calls only (base/raw_syscall.h: no errno, no libc state), no allocation; names
//     itself crun-keeper (PR_SET_NAME).
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

// Everything one keeper works from, in fixed storage.
struct KeeperJob {
  static constexpr int kMaxGroups = 4096;
  char cgroup_dir[4096];  // "" for none
  char marker[256];
  char run_dir[4096];  // removed if the agent dies; "" for none
  int group_count;  // written by apply_keeper_message only (atomically: read after the agent is gone)
  int finished;     // 1 once the agent said it ends normally
  int groups[kMaxGroups];
};

// What one message of the agent's does to `job`: a worker's pid adds its group (dropped past
// kMaxGroups), kKeeperGroupOver forgets them, kKeeperFinish marks the normal end. The pipe's
// reader applies it in the keeper; an agent whose keeper shares its memory applies it to the
// keeper's job itself, so that the keeper wakes once, at the pipe's end-of-file, and reads the
// job then (an agent killed half-way through leaves a count that covers only complete entries).
void apply_keeper_message(KeeperJob& job, int message);

// Fills `job`; false when the cgroup dir, the marker or the run dir does not fit.
bool make_keeper_job(KeeperJob& job, const char* cgroup_dir, const char* marker, const char* run_dir);

// Reads the agent's messages from descriptor 3 until end-of-file, cleans up, exits 0.
[[noreturn]] void keeper_main(KeeperJob& job);

// Runs the keeper when argv asks for it (never returns then); otherwise returns 2.
int run_keeper(int argc, char** argv);

// The program to start as the keeper: crun-keeper beside this program's executable, else
// /proc/self/exe.
std::string keeper_program();

}  // namespace crun
