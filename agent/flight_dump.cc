#include "agent/flight_dump.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/stack_capture.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::uint64_t size_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// Asks for a dump: one byte into the rank's FIFO, never waiting. "" when asked.
std::string request_dump(const std::string& pipe) {
  const int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO) return "no reader on " + pipe;
    if (errno == ENOENT) return "no pipe " + pipe;
    return pipe + ": " + std::strerror(errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {  // a plain file would just be written to
    ::close(fd);
    return pipe + ": not a FIFO";
  }
  const char byte = '1';
  ssize_t n;
  do {
    n = ::write(fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  const int error = errno;
  ::close(fd);
  if (n == 1 || (n < 0 && error == EAGAIN)) return "";  // full: requests wait there already
  return pipe + ": " + std::strerror(error);
}

}  // namespace

struct FlightDumps::Wait : std::enable_shared_from_this<FlightDumps::Wait> {
  Wait(asio::io_context& io) : io(io), notify(io), limit(io) {}
  asio::io_context& io;
  asio::posix::stream_descriptor notify;
  asio::steady_timer limit;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds bound{0};
  std::vector<FlightDump> dumps;
  std::vector<bool> waiting;
  std::map<int, std::vector<std::size_t>> by_watch;  // a folder's watch -> the dumps awaited there
  std::size_t left = 0;
  bool over = false;
  std::function<void(std::vector<FlightDump>)> done;

  void start(std::vector<FlightRequest> requests) {
    dumps.resize(requests.size());
    waiting.assign(requests.size(), false);
    const int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    const std::string in_error = in < 0 ? std::strerror(errno) : "";
    if (in >= 0) notify.assign(in);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      FlightDump& d = dumps[i];
      d.path = requests[i].dump;
      if (in < 0) {
        d.error = "inotify: " + in_error;
        continue;
      }
      // Watched before the request: a dump written at once is not missed.
      const std::string folder = fs::path(d.path).parent_path().string();
      const int wd = ::inotify_add_watch(in, folder.empty() ? "." : folder.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO);
      if (wd < 0) {
        d.error = "cannot watch " + folder + ": " + std::strerror(errno);
        continue;
      }
      d.error = request_dump(requests[i].pipe);
      if (!d.error.empty()) continue;
      by_watch[wd].push_back(i);
      waiting[i] = true;
      ++left;
    }
    if (left == 0) return finish();
    limit.expires_at(deadline);
    limit.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->over) return;
      for (std::size_t i = 0; i < self->dumps.size(); ++i) {
        if (self->waiting[i]) self->dumps[i].error = "not written within " + bound_text(self->bound);
      }
      self->finish();
    });
    watch();
  }

  void watch() {
    notify.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->over) return;
      alignas(struct inotify_event) char buffer[16384];
      ssize_t n;
      while ((n = ::read(self->notify.native_handle(), buffer, sizeof buffer)) > 0) {
        for (ssize_t at = 0; at < n;) {
          const auto* e = reinterpret_cast<const struct inotify_event*>(buffer + at);
          at += static_cast<ssize_t>(sizeof(struct inotify_event) + e->len);
          if (e->len == 0) continue;
          const auto it = self->by_watch.find(e->wd);
          if (it == self->by_watch.end()) continue;
          for (std::size_t i : it->second) {
            if (self->waiting[i] && fs::path(self->dumps[i].path).filename() == e->name) {
              self->dumps[i].bytes = size_of(self->dumps[i].path);  // as it was closed
              self->waiting[i] = false;
              --self->left;
            }
          }
        }
      }
      if (self->left == 0) return self->finish();
      self->watch();
    });
  }

  void finish() {
    if (over) return;
    over = true;
    stop();
    for (std::size_t i = 0; i < dumps.size(); ++i) {
      if (dumps[i].error.empty() && !waiting[i]) continue;  // sized when it was closed
      dumps[i].bytes = size_of(dumps[i].path);
    }
    asio::post(io, [callback = std::move(done), dumps = std::move(dumps), self = shared_from_this()]() mutable {
      callback(std::move(dumps));
    });
  }

  void stop() {
    boost::system::error_code ignored;
    notify.close(ignored);  // and with it every watch
    limit.cancel();
  }
};

FlightDumps::FlightDumps(asio::io_context& io) : io_(io) {}

FlightDumps::~FlightDumps() {
  if (wait_ && !wait_->over) {
    wait_->over = true;
    wait_->stop();
  }
}

void FlightDumps::run(std::vector<FlightRequest> requests, std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds bound, std::function<void(std::vector<FlightDump>)> done) {
  if (wait_ && !wait_->over) {
    wait_->over = true;
    wait_->stop();
  }
  wait_ = std::make_shared<Wait>(io_);
  wait_->deadline = deadline;
  wait_->bound = bound;
  wait_->done = std::move(done);
  wait_->start(std::move(requests));
}

}  // namespace crun
