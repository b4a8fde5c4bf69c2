// NCCL flight recorder: how crun asks torch >= 2.2's ProcessGroupNCCL, in every Python worker
// that enabled it, for its flight recorder dump before a kill (docs/operations.md, "Stacks before
// the kill"; docs/decisions.md, "NCCL flight recorder through torch's dump pipe").
//
// torch's interface, as its source has it (the pipe came with 2.2: pytorch#115139, #115770,
// #115798; the TORCH_FR_* spellings are its main branch's; read there, never run on a GPU):
//   - TORCH_FR_BUFFER_SIZE (newer name, read first) or TORCH_NCCL_TRACE_BUFFER_SIZE: entries in
//     the recorder's ring; > 0 enables it, and only then is there a pipe.
//   - TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a prefix; the world group (the first process group) of
//     global rank R makes a FIFO PREFIX<R>.pipe (unlink, mkfifo, opened O_RDONLY|O_NONBLOCK) and
//     its watchdog polls it; any byte written there starts a dump.
//   - TORCH_FR_DUMP_TEMP_FILE (newer, read first) or TORCH_NCCL_DEBUG_INFO_TEMP_FILE: a prefix;
//     the dump of global rank R is written to PREFIX<R> in place (std::ofstream: truncated,
//     written, closed; no temporary name, no rename), a pickle. Unset: a default crun cannot
//     know (/tmp/nccl_trace_rank_ or ~/.cache/torch/..., by version).
//
// Contract
//   - read_flight_recorder(env): from the workers' environment ("KEY=VALUE"): enabled when the
//     first of the buffer-size variables that is set holds a whole number > 0; error "" or one
//     line when that value is not a whole number (then not enabled); the user's pipe and dump
//     prefixes ("" when unset).
//   - set_flight_recorder(env, pipe_prefix, dump_prefix): sets TORCH_NCCL_DEBUG_INFO_PIPE_FILE,
//     and TORCH_NCCL_DEBUG_INFO_TEMP_FILE when dump_prefix is not "" (replacing earlier values).
//   - flight_pipe_file / flight_dump_file: PREFIX<rank>.pipe and PREFIX<rank>.
//
// Threading
//   Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

namespace crun {

struct FlightRecorderSettings {
  bool enabled = false;
  std::string error;        // "" or why the buffer size was not understood
  std::string pipe_prefix;  // the user's TORCH_NCCL_DEBUG_INFO_PIPE_FILE, "" unset
  std::string dump_prefix;  // the user's TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE, "" unset
};

FlightRecorderSettings read_flight_recorder(const std::vector<std::string>& env);
void set_flight_recorder(std::vector<std::string>& env, const std::string& pipe_prefix, const std::string& dump_prefix);
std::string flight_pipe_file(const std::string& prefix, int rank);
std::string flight_dump_file(const std::string& prefix, int rank);

}  // namespace crun
