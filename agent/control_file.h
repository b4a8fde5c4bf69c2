// The requests a worker leaves in its CRUN_CONTROL_FILE, read when the worker exits.
//
// Contract
//   - parse_control_file(text, file_size): `text` is the file's first bytes (the agent reads at
//     most kControlFileMaxBytes, base/control_requests.h), `file_size` its size when read. Lines
//     end with '\n'; a last line without one counts (its worker has exited: the file is final); a
//     '\r' before the newline is dropped; blank lines are skipped. A line is VERB [REASON]: VERB up
//     to the first space or tab, REASON the rest with its blanks trimmed at both ends.
//       - `exclude-node` or `stop-job`: a WorkerRequest, in the file's order; its reason made
//         printable (printable(): a control character, or a byte that is not part of valid
//         UTF-8, becomes '?').
//       - a line over kControlLineMaxBytes: ignored, one `ignored` entry with its number and size.
//       - any other verb: ignored, one entry naming it (printable, cut to kShownVerbBytes).
//       - a file past kControlFileMaxBytes: one entry with its size; the bytes past the bound, and
//         the line cut there, are ignored.
//     At most kShownRequests requests and kShownIgnored entries for lines are kept; the others are
//     counted (more_requests, more_ignored). `governing` is the request that decides, over every
//     line: the first stop-job, else the first exclude-node, else none.
//   - read_control_file(path): the file's first kControlFileMaxBytes, parsed. Opened without
//     following a link and without blocking (a worker may have put a FIFO or a link there): what
//     is not a regular file, or cannot be read, is one `ignored` entry saying why. A missing file
//     (the worker removed it) holds no request.
//   - request_text(r): "stop-job data corrupt" (the line, as parsed); verb_of(kind): its verb.
//   - add_to_outcome(outcome, r, worker_code): what a coordinated node publishes with its failure
//     (rendezvous/rendezvous_records.h): the reason ("no reason given" when empty: an empty field
//     means no request) in stop_request or exclude_request, and exit_code the worker's code, or
//     kExitNodeUnhealthy for an exclude-node from a worker that exited 0 (a failure is never
//     published as 0).
//
// Threading
//   Pure functions, except read_control_file, which reads one file on the caller's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crun {

struct WorkerRequest {
  enum class Kind { kExcludeNode, kStopJob };
  Kind kind = Kind::kStopJob;
  std::string reason;  // printable; may be empty
  bool operator==(const WorkerRequest&) const = default;
};

struct ControlFileReading {
  std::vector<WorkerRequest> requests;  // the first kShownRequests, in the file's order
  std::size_t more_requests = 0;
  std::optional<WorkerRequest> governing;
  std::vector<std::string> ignored;  // one line each: what was ignored and why
  std::size_t more_ignored = 0;
};

inline constexpr std::size_t kShownRequests = 8;
inline constexpr std::size_t kShownIgnored = 8;
inline constexpr std::size_t kShownVerbBytes = 40;

ControlFileReading parse_control_file(std::string_view text, std::uint64_t file_size);
ControlFileReading read_control_file(const std::string& path);

std::string_view verb_of(WorkerRequest::Kind kind);
std::string request_text(const WorkerRequest& r);
std::string printable(std::string_view bytes);

struct RoundOutcome;
void add_to_outcome(RoundOutcome& outcome, const WorkerRequest& r, int worker_code);

}  // namespace crun
