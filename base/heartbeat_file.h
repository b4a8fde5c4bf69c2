// The heartbeat file: how a worker tells its agent that it is making progress, with no library.
//
// Contract
//   crun (with --heartbeat-timeout or --initial-heartbeat-timeout) gives each worker a file of
//   kHeartbeatFileBytes bytes, named by CRUN_HEARTBEAT_FILE, initially zero. A beat overwrites it
//   with two native-endian 64-bit integers: the step (any number that grows with progress) and
//   the time of the beat, CLOCK_MONOTONIC in nanoseconds (never 0). From Python, in two lines:
//       hb = mmap.mmap(os.open(os.environ["CRUN_HEARTBEAT_FILE"], os.O_RDWR), 16)
//       hb[:] = struct.pack("=qq", step, time.monotonic_ns())        # every step
//   Native workers call crun::rt::Runtime::heartbeat(step). The agent reads the file with
//   read_heartbeat_file() at its deadlines only: a worker never waits on the agent.
//
// Threading
//   read_heartbeat_file() is a pure function of the file's bytes; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace crun {

inline constexpr std::size_t kHeartbeatFileBytes = 16;
inline constexpr const char* kHeartbeatFileVariable = "CRUN_HEARTBEAT_FILE";

struct Heartbeat {
  std::int64_t step = 0;
  std::int64_t monotonic_ns = 0;  // 0: no beat yet
};

// What the file open at `fd` holds now; nullopt when it cannot be read whole (a worker may have
// truncated it: then it counts as no beat).
std::optional<Heartbeat> read_heartbeat_file(int fd);

}  // namespace crun
