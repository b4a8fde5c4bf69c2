#include "agent/console_sink.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <exception>
#include <vector>

#include "base/fd_io.h"

namespace crun {

namespace asio = boost::asio;

struct ConsoleSink::Impl {
  // How bytes reach the stream without blocking: chosen at the first write (one fstat).
  enum class Mode { kUnchosen, kNoWait, kSend, kOwn, kBlocking, kBroken };

  Impl(asio::io_context& context, int stream) : io(context), fd(stream) {}
  ~Impl() {
    if (own >= 0) ::close(own);
  }

  asio::io_context& io;
  const int fd;
  int own = -1;  // kOwn: our own non-blocking description of the stream
  Mode mode = Mode::kUnchosen;
  bool pipe = false;  // a pipe or FIFO: its writes of up to PIPE_BUF bytes are never split
  std::unique_ptr<asio::posix::stream_descriptor> waiter;  // an epoll instance holding the stream
  bool waiting = false;
  std::string backlog;  // bytes before `head` are written
  std::size_t head = 0;
  std::vector<std::function<void()>> drained;
  std::shared_ptr<int> life = std::make_shared<int>(0);  // a wait's handler may outlive the sink

  std::size_t pending() const { return backlog.size() - head; }

  void choose() {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      mode = Mode::kBlocking;
    } else if (S_ISSOCK(st.st_mode)) {
      mode = Mode::kSend;
    } else if (S_ISFIFO(st.st_mode)) {
      mode = Mode::kNoWait;
      pipe = true;
    } else if (S_ISCHR(st.st_mode)) {
      reopen();
    } else {
      mode = Mode::kBlocking;  // a regular file: its writes do not wait for a reader
    }
  }

  // A non-blocking description of the stream's own, leaving the shared one's flags alone.
  void reopen() {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    own = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    mode = own >= 0 ? Mode::kOwn : Mode::kBlocking;
  }

  // Bytes written now, or -1 with errno: EAGAIN (full) or the stream's failure.
  ssize_t write_now(const char* p, std::size_t n) {
    if (mode == Mode::kUnchosen) choose();
    if (pipe) n = whole_lines(p, n);
    for (;;) {
      ssize_t r = -1;
      switch (mode) {
        case Mode::kNoWait: {
          iovec v{const_cast<char*>(p), n};
          r = ::pwritev2(fd, &v, 1, -1, RWF_NOWAIT);
          if (r < 0 && errno == EOPNOTSUPP) {  // an older kernel's pipe
            reopen();
            continue;
          }
          break;
        }
        case Mode::kSend:
          r = ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
          break;
        case Mode::kOwn:
          r = ::write(own, p, n);
          break;
        case Mode::kBlocking:
          return write_all(fd, p, n) ? static_cast<ssize_t>(n) : -1;
        case Mode::kUnchosen:
        case Mode::kBroken:
          errno = EPIPE;
          return -1;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        errno = EIO;
        return -1;
      }
      return r;
    }
  }

  // On a pipe, what goes in one write: the whole lines that fit PIPE_BUF, which the kernel writes
  // whole or not at all, so a line is never split by another writer of the pipe (another thread
  // or process of the job, the other stream of `2>&1` written elsewhere); a longer line goes as is.
  static std::size_t whole_lines(const char* p, std::size_t n) {
    if (n <= PIPE_BUF) return n;
    const void* last = ::memrchr(p, '\n', PIPE_BUF);
    return last != nullptr ? static_cast<std::size_t>(static_cast<const char*>(last) - p) + 1 : n;
  }

  static bool full(int error) { return error == EAGAIN || error == EWOULDBLOCK; }

  // The stream failed (its reader is gone): the rest is dropped, and readers waiting on us go on.
  void fail() {
    mode = Mode::kBroken;
    std::string().swap(backlog);
    head = 0;
    run_drained();
  }

  void run_drained() {
    std::vector<std::function<void()>> due;
    due.swap(drained);
    for (auto& fn : due) fn();
  }

  // Writes what the stream takes now; true when it failed.
  bool write_backlog() {
    while (pending() > 0) {
      const ssize_t r = write_now(backlog.data() + head, pending());
      if (r > 0) {
        head += static_cast<std::size_t>(r);
        continue;
      }
      if (full(errno)) break;
      fail();
      return true;
    }
    if (pending() == 0) {
      head = 0;
      if (backlog.capacity() > kHighWater) {
        std::string().swap(backlog);
      } else {
        backlog.clear();
      }
    } else if (head > backlog.size() / 2) {
      backlog.erase(0, head);
      head = 0;
    }
    return false;
  }

  int target() const { return own >= 0 ? own : fd; }

  bool writable_now() const {
    pollfd p{target(), POLLOUT, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT) != 0;
  }

  // Waits for room on the loop. Asio's own waits would set O_NONBLOCK on the description they
  // wait on, which is shared: the loop waits on an epoll instance of ours that holds the stream.
  void arm() {
    if (pending() == 0) return;
    if (!waiter && !make_waiter()) {
      mode = Mode::kBlocking;  // nothing to wait on: written as before
      if (!write_backlog()) run_drained();
      return;
    }
    if (!waiting) {
      waiting = true;
      std::weak_ptr<int> alive = life;
      waiter->async_wait(asio::posix::stream_descriptor::wait_read, [this, alive](const boost::system::error_code& ec) {
        if (alive.expired()) return;
        waiting = false;
        if (!ec) pump();
      });
    }
    // Room made between the last full write and the wait's start wakes nothing: look once more.
    if (writable_now()) {
      std::weak_ptr<int> alive = life;
      asio::post(io, [this, alive] {
        if (!alive.expired()) pump();
      });
    }
  }

  bool make_waiter() {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return false;
    epoll_event ev{};
    ev.events = EPOLLOUT;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, target(), &ev) != 0) {
      ::close(ep);
      return false;
    }
    try {
      waiter = std::make_unique<asio::posix::stream_descriptor>(io, ep);
    } catch (const std::exception&) {
      ::close(ep);
      return false;
    }
    return true;
  }

  void pump() {
    if (write_backlog()) return;
    if (pending() <= kHighWater / 2) run_drained();
    arm();
  }
};

ConsoleSink::ConsoleSink(asio::io_context& io, int fd) : impl_(std::make_unique<Impl>(io, fd)) {}
ConsoleSink::~ConsoleSink() = default;

void ConsoleSink::write(const char* data, std::size_t size) {
  Impl& s = *impl_;
  if (size == 0 || s.mode == Impl::Mode::kBroken) return;
  if (s.pending() == 0) {
    const ssize_t r = s.write_now(data, size);
    if (r == static_cast<ssize_t>(size)) return;
    if (r < 0 && !Impl::full(errno)) {
      s.fail();
      return;
    }
    const std::size_t done = r > 0 ? static_cast<std::size_t>(r) : 0;
    data += done;
    size -= done;
  }
  s.backlog.append(data, size);
  s.arm();
}

bool ConsoleSink::backlogged() const { return impl_->pending() > kHighWater; }

void ConsoleSink::when_drained(std::function<void()> fn) {
  if (impl_->pending() <= kHighWater / 2) {
    asio::post(impl_->io, std::move(fn));
    return;
  }
  impl_->drained.push_back(std::move(fn));
}

void ConsoleSink::flush() {
  Impl& s = *impl_;
  while (s.pending() > 0) {
    if (s.write_backlog()) return;
    if (s.pending() == 0) break;
    pollfd p{s.own >= 0 ? s.own : s.fd, POLLOUT, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) {
      s.fail();
      return;
    }
  }
}

std::size_t ConsoleSink::backlog_bytes() const { return impl_->pending(); }

bool ConsoleSink::same_stream(int a, int b) {
  struct stat sa {}, sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace crun
