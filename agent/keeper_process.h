// The crun-keeper program (launcher/keeper_main.cc is its main; agent/keeper.h starts it): ends
// what is left of an agent's job once the agent is gone, however it went.
//
// Contract
//   - `crun-keeper <cgroup dir or ""> CRUN_AGENT_ID=<id> <run dir or "">`, with the read end of
//     the agent's pipe at descriptor 3, is a keeper; nothing else is: another argument count, a
//     marker without that prefix, or no pipe at 3, and run_keeper() says so on stderr in one line
//     and returns 2 at once (no command line typed by hand turns it into a process killer).
//   - A keeper first ignores the terminal's and a scheduler's signals (SIGINT, SIGTERM, SIGHUP,
//     SIGQUIT, SIGUSR1/2, SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU: the agent acts on those and
//     ends the keeper itself), then unblocks every signal: the agent starts it with all of them
//     blocked, so none of those can end it before. It then takes /dev/null as stdin and stdout
//     and / as its current directory, and closes every descriptor above 3; stderr stays the
//     agent's.
//   - It reads the agent's messages (one int each, kKeeperPipeFd: a worker's pid = its process
//     group; kKeeperGroupOver: that group is over, forget the pids; kKeeperFinish: the agent ends
//     normally; kKeeperRemoveTree, then an int n (1..kKeeperMaxPath) and n bytes: a directory to
//     remove too if the agent dies, the job's state root) until end-of-file, then:
//       after kKeeperFinish (normal end): removes the cgroup, if any (killing any straggler first);
//       without it (the agent died, SIGKILL included): with the cgroup, cgroup.kill, wait until it
//       is empty (at most 10 s), rmdir; then (with or without one) SIGKILL to every process group
//       it was told of, then to every process whose environment holds the marker, scanning /proc
//       again until a scan finds none (at most 50 scans, 10 s); last, the run directory, if it
//       was given one (the agent's temporary one: error files, heartbeats; never one that holds
//       logs), with all it holds (base/remove_tree.h: no symbolic link followed), and each
//       directory kKeeperRemoveTree named, the same way;
//     and returns 0. What it cannot clean up it reports on stderr (base/log.h: "crun-keeper: ..."
//     once its main has set that name).
//
// Threading
//   A process of its own, one thread.
#pragma once

namespace crun {

inline constexpr char kKeeperMarkerPrefix[] = "CRUN_AGENT_ID=";
inline constexpr int kKeeperPipeFd = 3;
// Messages on the pipe besides a worker's pid.
inline constexpr int kKeeperGroupOver = 0;
inline constexpr int kKeeperFinish = -1;
inline constexpr int kKeeperRemoveTree = -2;
inline constexpr int kKeeperMaxPath = 4000;  // the whole message fits in PIPE_BUF: one atomic write

// The keeper, for argv as above: 0 once it has cleaned up, 2 when argv or descriptor 3 is not
// an agent's.
int run_keeper(int argc, char** argv);

}  // namespace crun
