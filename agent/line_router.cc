#include "agent/line_router.h"

#include "agent/console_collapser.h"
#include "agent/console_sink.h"
#include "base/fd_io.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace crun {
namespace {
constexpr std::size_t kMaxPartial = 1u << 20;
}

DuplicateSink::DuplicateSink(int f, std::vector<std::string> fl, std::string p)
    : fd(f), filters(std::move(fl)), path(std::move(p)) {}

DuplicateSink::~DuplicateSink() {
  if (fd >= 0) ::close(fd);
}

bool DuplicateSink::matches(const char* line, std::size_t size) const {
  const std::string_view text(line, size);
  for (const auto& f : filters)
    if (text.find(f) != std::string_view::npos) return true;
  return false;
}

LineRouter::LineRouter(StreamRoute route) : route_(std::move(route)) {}

LineRouter::~LineRouter() {
  if (route_.file_fd >= 0) ::close(route_.file_fd);
}

void LineRouter::feed(const char* data, std::size_t size) {
  if (size == 0) return;
  if (route_.file_fd >= 0 && !write_all(route_.file_fd, data, size)) drop_file(errno);
  if (route_.console_fd < 0 && route_.tail_lines == 0) return;
  const char* last_nl = static_cast<const char*>(::memrchr(data, '\n', size));
  if (last_nl == nullptr) {
    partial_.append(data, size);
    if (partial_.size() >= kMaxPartial) flush_partial();
    return;
  }
  const std::size_t whole = static_cast<std::size_t>(last_nl - data) + 1;
  if (!partial_.empty()) {
    // Complete the pending line first, then the rest in one go.
    const char* first_nl = static_cast<const char*>(std::memchr(data, '\n', size));
    const std::size_t head = static_cast<std::size_t>(first_nl - data) + 1;
    partial_.append(data, head);
    std::string line;
    line.swap(partial_);
    out_.clear();
    emit_lines(line.data(), line.size());
    if (head < whole) emit_lines(data + head, whole - head);
  } else {
    out_.clear();
    emit_lines(data, whole);
  }
  flush_console();
  partial_.append(data + whole, size - whole);
}

void LineRouter::finish() {
  flush_partial();
  if (route_.collapse != nullptr && route_.console_fd >= 0) route_.collapse->end_rank(route_.local_rank);
}

void LineRouter::flush_partial() {
  if (partial_.empty()) return;
  partial_.push_back('\n');
  out_.clear();
  std::string line;
  line.swap(partial_);
  emit_lines(line.data(), line.size());
  flush_console();
}

void LineRouter::flush_console() {
  if (route_.console_fd >= 0 && !out_.empty()) {
    if (route_.console != nullptr) {
      route_.console->write(out_.data(), out_.size());
    } else {
      write_all(route_.console_fd, out_.data(), out_.size());
    }
  }
  out_.clear();
  if (dup_.empty()) return;
  DuplicateSink& sink = *route_.duplicate;
  if (sink.fd >= 0 && !write_all(sink.fd, dup_.data(), dup_.size())) {
    const std::string line = "crun: cannot write " + sink.path + ": " + std::strerror(errno) +
                             "; the rest of this log is dropped\n";
    write_all(2, line.data(), line.size());
    ::close(sink.fd);
    sink.fd = -1;
  }
  dup_.clear();
}

void LineRouter::emit_lines(const char* data, std::size_t size) {
  const bool collapsed = route_.collapse != nullptr && route_.console_fd >= 0;
  if (collapsed) route_.collapse->lines(route_.local_rank, data, size);
  const bool prefixed = !collapsed && route_.console_fd >= 0 && !route_.console_prefix.empty();
  if (!collapsed && route_.console_fd >= 0 && route_.console_prefix.empty()) out_.append(data, size);
  std::size_t pos = 0;
  while (pos < size) {
    const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', size - pos));
    const std::size_t end = nl ? static_cast<std::size_t>(nl - data) + 1 : size;
    if (prefixed) {
      out_.append(route_.console_prefix);
      out_.append(data + pos, end - pos);
    }
    if (route_.duplicate && route_.duplicate->matches(data + pos, end - pos - (nl ? 1 : 0))) {
      dup_.append(route_.console_prefix);
      dup_.append(data + pos, end - pos);
    }
    remember(data + pos, end - pos - (nl ? 1 : 0));
    pos = end;
  }
}

void LineRouter::drop_file(int error) {
  const std::string line = "crun: cannot write " + route_.file_path + ": " + std::strerror(error) +
                           "; the rest of this log is dropped\n";
  write_all(2, line.data(), line.size());
  ::close(route_.file_fd);
  route_.file_fd = -1;
}

void LineRouter::remember(const char* line, std::size_t size) {
  if (route_.tail_lines == 0) return;
  if (tail_.size() == route_.tail_lines) {
    std::string reuse = std::move(tail_.front());
    tail_.pop_front();
    reuse.assign(line, size);
    tail_.push_back(std::move(reuse));
  } else {
    tail_.emplace_back(line, size);
  }
}

}  // namespace crun
