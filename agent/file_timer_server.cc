#include "agent/file_timer_server.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/rounding.h"
#include "store/log_throttle.h"

namespace crun {

namespace asio = boost::asio;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw std::runtime_error("the file timer's pipe " + path + ": " + what + ": " + std::strerror(err));
}

// Makes the FIFO, replacing one an earlier run left behind; refuses to replace anything else.
void make_fifo(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) throw std::runtime_error("the file timer's pipe " + path + " exists and is not a FIFO");
    if (::unlink(path.c_str()) != 0) fail(path, "cannot remove the old FIFO", errno);
  }
  if (::mkfifo(path.c_str(), 0600) != 0) fail(path, "cannot create it", errno);
}

}  // namespace

struct FileTimerServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, std::string p, Callbacks cb)
      : path(std::move(p)), callbacks(std::move(cb)), reader(io), writer(io), timer(io) {}

  void open() {
    make_fifo(path);
    int r = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (r < 0) {
      int err = errno;
      ::unlink(path.c_str());
      fail(path, "cannot open it", err);
    }
    reader.assign(r);
    // Our own writer: the read end never sees end-of-file between workers.
    int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w < 0) {
      int err = errno;
      close();
      fail(path, "cannot open it for writing", err);
    }
    writer.assign(w);
    read();
  }

  void close() {
    closed = true;
    boost::system::error_code ignored;
    timer.cancel();
    reader.close(ignored);
    writer.close(ignored);
    ::unlink(path.c_str());
  }

  void read() {
    reader.async_read_some(asio::buffer(buf), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                          std::size_t n) {
      if (self->closed) return;  // a completion queued before close(): the callbacks' owner is gone
      if (ec) {
        if (ec != asio::error::operation_aborted) self->say("read", "stopped reading: " + ec.message());
        return;
      }
      self->take(std::string_view(self->buf.data(), n));
      self->arm();
      self->read();
    });
  }

  void take(std::string_view bytes) {
    lines.feed(
        bytes, [this](std::string_view line) { handle(std::string(line)); },
        [this] { say("oversized", "ignored a request longer than " + std::to_string(PIPE_BUF) + " bytes"); });
  }

  void handle(const std::string& line) {
    if (line.empty()) return;
    FileTimerRequest r;
    try {
      r = parse_file_timer_request(line);
    } catch (const std::invalid_argument& e) {
      say("malformed", std::string("ignored a malformed request: ") + e.what());
      return;
    }
    if (!callbacks.owns(r.pid)) {
      say("stranger", "ignored a request from pid " + std::to_string(r.pid) + ", which is not one of this job's workers");
      return;
    }
    if (!table.apply(r)) say("full", "ignored a request from pid " + std::to_string(r.pid) + ": too many open scopes");
  }

  void arm() {
    auto next = table.next_expiry();
    if (!next) {
      timer.cancel();
      armed_for.reset();
      return;
    }
    if (armed_for && *armed_for == *next) return;
    armed_for = next;
    double wait = std::max(0.0, *next - wall_now());
    timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(wait, 86400.0 * 365))));
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->closed) return;
      self->armed_for.reset();
      self->fire();
    });
  }

  void fire() {
    const double now = wall_now();
    for (auto& r : table.expire(now)) {
      FileTimerExpiry e;
      // Bounded: a scope may have been set to expire in the distant past.
      e.overdue = std::chrono::milliseconds(nearest_integer(std::min(now - r.expiration_time, 1e9) * 1000));
      e.request = std::move(r);
      callbacks.on_expired(e);
    }
    arm();
  }

  void say(std::string_view kind, const std::string& line) {
    auto suppressed = throttle.admit(kind, LogThrottle::Clock::now());
    if (!suppressed) return;
    callbacks.log("file timer: " + line +
                  (*suppressed != 0 ? " (" + std::to_string(*suppressed) + " similar suppressed)" : ""));
  }

  std::string path;
  Callbacks callbacks;
  asio::posix::stream_descriptor reader;
  asio::posix::stream_descriptor writer;
  asio::steady_timer timer;
  std::optional<double> armed_for;
  std::array<char, 8192> buf{};
  LineSplitter lines{PIPE_BUF};
  bool closed = false;
  FileTimerTable table;
  LogThrottle throttle;
};

FileTimerServer::FileTimerServer(asio::io_context& io, std::string path, Callbacks callbacks)
    : impl_(std::make_shared<Impl>(io, std::move(path), std::move(callbacks))) {
  impl_->open();
}

FileTimerServer::~FileTimerServer() { impl_->close(); }

const std::string& FileTimerServer::path() const { return impl_->path; }

void FileTimerServer::forget(int pid) {
  impl_->table.forget(pid);
  impl_->arm();
}

void FileTimerServer::clear() {
  impl_->table = FileTimerTable();
  impl_->arm();
}

}  // namespace crun
