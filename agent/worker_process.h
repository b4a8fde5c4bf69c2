// spawn_worker: vfork + exec of one worker process, the way the agent needs it.
//
// Contract
//   - With a job cgroup, on x86-64, the child is made by clone3 with CLONE_VM | CLONE_VFORK |
//     CLONE_INTO_CGROUP | CLONE_CLEAR_SIGHAND (in a sanitizer build without CLONE_VM, the same
//     path on a copy of the agent's memory) on a stack of its own: born
//     in the cgroup, the agent's signal handlers already back to their defaults (a vforked child
//     resets each one it finds itself: none of the agent's may run between fork and exec). A
//     write to cgroup.procs instead (vfork, then the child moves itself) takes the kernel's
//     cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period unless another
//     migration just did: ~11 ms here for a job started on an idle machine. Where clone3 says
//     it cannot (an older kernel, another architecture), vfork and the write, as before.
//   - The child runs in a process group of its own (pgid == pid), has PR_SET_PDEATHSIG(SIGKILL)
//     set before exec (and exits at once if the agent is already gone), PR_SET_PTRACER(the agent)
//     (Yama: the agent's helpers may read its stacks; agent/stack_capture.h), starts with an empty
//     signal mask and default SIGPIPE, stdin from /dev/null, stdout and stderr on fresh pipes
//     whose read ends are returned to the caller (close-on-exec, non-blocking); with
//     SpawnOptions::merge_stderr both on one pipe.
//   - The worker inherits descriptors 0, 1 and 2 and nothing else: every other descriptor is
//     closed in the child before exec, whatever its close-on-exec flag (the agent's sockets, and
//     anything crun's own parent left open), but SpawnOptions::message_fd, which becomes
//     descriptor 3 (a standby's pipe, agent/standby_pool.h).
//   - `argv[0]` must already be a path (resolve_executable does the PATH search); `env` is the
//     complete environment as "KEY=VALUE" strings.
//   - The worker starts with the open-files soft limit crun itself was started with, even when
//     crun's store raised its own (base/open_files.h).
//   - A failing exec writes one line to the worker's stderr and exits 127.
//   - The returned pidfd (pidfd_open) becomes readable when the child ends; reap it with
//     reap_worker(). Throws std::system_error when pipes, clone3/vfork or pidfd_open fail.
//
// Threading
//   Call from the agent's event-loop thread: PR_SET_PDEATHSIG fires when the forking thread ends.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/exit_status.h"

namespace crun {

struct SpawnedWorker {
  int pid = -1;
  int pidfd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

struct SpawnOptions {
  // The job cgroup (job_cgroup.h): its directory, where the child is created (clone3's
  // CLONE_INTO_CGROUP), else its cgroup.procs, to which the child writes "0" before exec; so the
  // worker and everything it starts live in that cgroup. A failure to join is reported on the
  // worker's stderr and the child exits 127. -1: no cgroup.
  int cgroup_dir_fd = -1;
  int cgroup_procs_fd = -1;
  // The path execve runs ("": argv[0]). argv[0] is what the worker sees as its own name, as the
  // user wrote it (`sleep`, not `/usr/bin/sleep`), as under torchrun.
  std::string program;
  // The logical CPUs the worker may run on: the child sets its affinity to them before exec (as
  // numactl --physcpubind). A failure is reported on the worker's stderr and the child exits 127.
  // Empty: the agent's affinity, inherited.
  std::vector<int> cpus;
  // A descriptor the child gets as descriptor 3, without close-on-exec (a standby's message
  // pipe); -1: none, the child has 0-2 only.
  int message_fd = -1;
  // stderr goes into the stdout pipe (one stream, in the order written: a node check's output,
  // agent/node_check.h); SpawnedWorker::stderr_fd is then -1.
  bool merge_stderr = false;
};

SpawnedWorker spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const SpawnOptions& options = {});

// Non-blocking reap of `pid` (via waitid on its pidfd); nullopt when it is still running.
std::optional<ExitStatus> reap_worker(int pid, int pidfd);

// The path execve should run for `name`: itself when it contains '/', else the first executable
// match in `search_path` (a PATH: directories separated by ':', an empty one meaning "."). nullopt
// when none is found.
std::optional<std::string> resolve_executable(const std::string& name, const std::string& search_path);

}  // namespace crun
