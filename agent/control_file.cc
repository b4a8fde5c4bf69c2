#include "agent/control_file.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/control_requests.h"
#include "base/exit_codes.h"
#include "rendezvous/rendezvous_records.h"

namespace crun {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The length of the valid UTF-8 sequence at s[i] (a code point from U+00A0 on, no surrogate, no
// overlong form), or 0.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  const std::size_t left = s.size() - i;
  if (c >= 0xC2 && c <= 0xDF) {
    if (left < 2 || !continuation(at(1))) return 0;
    return c == 0xC2 && at(1) < 0xA0 ? 0 : 2;  // U+0080..U+009F: C1 control characters
  }
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !continuation(at(1)) || !continuation(at(2))) return 0;
    if (c == 0xE0 && at(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && at(1) > 0x9F) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !continuation(at(1)) || !continuation(at(2)) || !continuation(at(3))) return 0;
    if (c == 0xF0 && at(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && at(1) > 0x8F) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

std::string line_no(std::size_t n) { return "line " + std::to_string(n); }

}  // namespace

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (const std::size_t n = c >= 0x80 ? utf8_sequence(bytes, i) : 0; n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

std::string_view verb_of(WorkerRequest::Kind kind) {
  return kind == WorkerRequest::Kind::kExcludeNode ? kControlExcludeNode : kControlStopJob;
}

std::string request_text(const WorkerRequest& r) {
  std::string s(verb_of(r.kind));
  if (!r.reason.empty()) s += ' ' + r.reason;
  return s;
}

void add_to_outcome(RoundOutcome& outcome, const WorkerRequest& r, int worker_code) {
  const bool exclude = r.kind == WorkerRequest::Kind::kExcludeNode;
  outcome.exit_code = exclude && worker_code == 0 ? kExitNodeUnhealthy : worker_code;
  (exclude ? outcome.exclude_request : outcome.stop_request) = r.reason.empty() ? "no reason given" : r.reason;
}

ControlFileReading parse_control_file(std::string_view text, std::uint64_t file_size) {
  ControlFileReading out;
  auto ignore = [&](std::string why) {
    if (out.ignored.size() < kShownIgnored) out.ignored.push_back(std::move(why));
    else ++out.more_ignored;
  };
  bool cut = false;
  if (text.size() > kControlFileMaxBytes) text = text.substr(0, kControlFileMaxBytes);
  if (file_size > text.size()) {
    // Past the bound: the line cut there goes with the rest.
    cut = true;
    const auto last = text.rfind('\n');
    text = last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
  }
  std::size_t number = 0;
  while (!text.empty()) {
    ++number;
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.size() > kControlLineMaxBytes) {
      ignore(line_no(number) + ": " + std::to_string(line.size()) + " bytes, over the " +
             std::to_string(kControlLineMaxBytes) + "-byte limit of a line");
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = trim(line);
    if (line.empty()) continue;
    std::size_t verb_end = 0;
    while (verb_end < line.size() && !is_blank(line[verb_end])) ++verb_end;
    const std::string_view verb = line.substr(0, verb_end);
    WorkerRequest r;
    if (verb == kControlExcludeNode) {
      r.kind = WorkerRequest::Kind::kExcludeNode;
    } else if (verb == kControlStopJob) {
      r.kind = WorkerRequest::Kind::kStopJob;
    } else {
      std::string shown = printable(verb.substr(0, kShownVerbBytes));
      if (verb.size() > kShownVerbBytes) shown += "...";
      ignore(line_no(number) + ": unknown request '" + shown + "' (known: " + std::string(kControlExcludeNode) + ", " +
             std::string(kControlStopJob) + ")");
      continue;
    }
    r.reason = printable(trim(line.substr(verb_end)));
    if (!out.governing || (r.kind == WorkerRequest::Kind::kStopJob && out.governing->kind != r.kind)) out.governing = r;
    if (out.requests.size() < kShownRequests) out.requests.push_back(std::move(r));
    else ++out.more_requests;
  }
  if (cut) {
    ignore("the file holds " + std::to_string(file_size) + " bytes: what lies past its first " +
           std::to_string(kControlFileMaxBytes) + " is ignored");
  }
  return out;
}

ControlFileReading read_control_file(const std::string& path) {
  ControlFileReading failed;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return failed;
    failed.ignored.push_back("cannot open " + path + ": " +
                             (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno)));
    return failed;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    failed.ignored.push_back(path + " is not a regular file: not read");
    return failed;
  }
  if (st.st_size == 0) {  // the common case: no request, nothing to read
    ::close(fd);
    return failed;
  }
  // As much as the file holds, up to the bound: memory grows with the bytes the worker wrote.
  std::string text(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), kControlFileMaxBytes), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      failed.ignored.push_back("cannot read " + path + ": " + std::strerror(err));
      return failed;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  // Read to its end, or up to the bound: then its size says whether more lies beyond.
  std::uint64_t size = got;
  if (got == kControlFileMaxBytes) {
    if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) > size) size = static_cast<std::uint64_t>(st.st_size);
  }
  ::close(fd);
  return parse_control_file(text, size);
}

}  // namespace crun
