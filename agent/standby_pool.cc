#include "agent/standby_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "agent/console_sink.h"
#include "agent/line_router.h"
#include "agent/standby_plan.h"
#include "agent/worker_containment.h"
#include "base/log.h"

namespace crun {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kReadBytes = 65536;
constexpr std::chrono::seconds kReapBound{2};

struct Stream {
  Stream(asio::io_context& io, int fd, StreamRoute route) : pipe(io, fd), router(std::move(route)) {}
  asio::posix::stream_descriptor pipe;
  LineRouter router;
  bool open = true;
};

StreamRoute log_route(ConsoleSink* log, int local_rank, std::size_t tail) {
  StreamRoute r;
  r.console_fd = 2;
  r.console = log;
  r.console_prefix = "crun: standby" + std::to_string(local_rank) + ": ";
  r.tail_lines = tail;
  return r;
}

struct Standby {
  Standby(asio::io_context& io, const SpawnedWorker& s, int lr, WorkerLaunchPlan p, int message, ConsoleSink* log)
      : local_rank(lr),
        plan(std::move(p)),
        pid(s.pid),
        pidfd(io, s.pidfd),
        out(io, s.stdout_fd, log_route(log, lr, 0)),
        err(io, s.stderr_fd, log_route(log, lr, 1)),
        message_fd(message) {}
  int local_rank;
  WorkerLaunchPlan plan;
  int pid;
  asio::posix::stream_descriptor pidfd;
  Stream out;
  Stream err;
  int message_fd;      // the pipe's write end (-1: closed)
  bool exited = false;  // reaped; `why` says how it ended
  bool closed = false;  // taken or given up: its handlers must not touch it
  std::string why;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

struct StandbyPool::Impl {
  Impl(asio::io_context& context, int nproc, WorkerContainment* c, ConsoleSink* l)
      : io(context), standbys(static_cast<std::size_t>(nproc)), containment(c), log(l) {}

  asio::io_context& io;
  std::vector<std::shared_ptr<Standby>> standbys;  // by local rank
  WorkerContainment* containment;
  ConsoleSink* log;
  std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(kReadBytes);

  // Reads what is there, at most `max_reads` times (a standby printing without end must not hold
  // the loop); closes the stream at its end.
  void drain(Stream& s, int max_reads) {
    for (int i = 0; s.open && i < max_reads; ++i) {
      const ssize_t n = ::read(s.pipe.native_handle(), buffer.get(), kReadBytes);
      if (n > 0) {
        s.router.feed(buffer.get(), static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      s.open = false;
      s.router.finish();
      boost::system::error_code ignored;
      s.pipe.close(ignored);
    }
  }

  void watch_stream(const std::shared_ptr<Standby>& sb, Stream& s) {
    s.pipe.async_wait(asio::posix::stream_descriptor::wait_read, [this, sb, &s](const boost::system::error_code& ec) {
      if (ec || sb->closed || !s.open) return;
      drain(s, 16);
      if (s.open) watch_stream(sb, s);
    });
  }

  void watch_exit(const std::shared_ptr<Standby>& sb) {
    sb->pidfd.async_wait(asio::posix::stream_descriptor::wait_read, [this, sb](const boost::system::error_code& ec) {
      if (ec || sb->closed || sb->exited) return;
      if (!reaped(*sb)) watch_exit(sb);
    });
  }

  // Reaps `sb` if it has ended: its output routed, why it ended kept, its descriptors closed.
  bool reaped(Standby& sb) {
    const auto status = reap_worker(sb.pid, sb.pidfd.native_handle());
    if (!status) return false;
    sb.exited = true;
    if (containment != nullptr) containment->worker_reaped(sb.pid);
    drain(sb.out, 64);  // a pipe holds at most 1 MiB
    drain(sb.err, 64);
    sb.out.router.finish();
    sb.err.router.finish();
    sb.why = status->describe();
    if (!sb.err.router.tail().empty() && !sb.err.router.tail().back().empty()) sb.why += ": " + sb.err.router.tail().back();
    release(sb);
    return true;
  }

  // Its descriptors closed; no handler touches it again.
  void release(Standby& sb) {
    sb.closed = true;
    boost::system::error_code ignored;
    sb.pidfd.close(ignored);
    sb.out.pipe.close(ignored);
    sb.err.pipe.close(ignored);
    sb.out.open = sb.err.open = false;
    close_fd(sb.message_fd);
  }

  // SIGKILL, then reaped within the bound (its pidfd polled).
  void kill_and_reap(Standby& sb) {
    ::kill(-sb.pid, SIGKILL);
    ::kill(sb.pid, SIGKILL);
    const auto deadline = std::chrono::steady_clock::now() + kReapBound;
    while (!reaped(sb)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {  // left to the subreaper and the keeper
        release(sb);
        return;
      }
      pollfd p{sb.pidfd.native_handle(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
  }
};

StandbyPool::StandbyPool(asio::io_context& io, int nproc, WorkerContainment* containment, ConsoleSink* log)
    : impl_(std::make_unique<Impl>(io, nproc, containment, log)) {}

StandbyPool::~StandbyPool() {
  for (auto& sb : impl_->standbys) {
    if (sb && !sb->exited) impl_->kill_and_reap(*sb);
  }
}

void StandbyPool::start(int local_rank, const WorkerLaunchPlan& plan) {
  auto& slot = impl_->standbys.at(static_cast<std::size_t>(local_rank));
  if (slot) return;
  int message[2] = {-1, -1};
  if (::pipe2(message, O_CLOEXEC) != 0) {
    log_line("local rank " + std::to_string(local_rank) + ": no standby (pipe: " + std::strerror(errno) + ")");
    return;
  }
  SpawnOptions options;
  options.program = plan.program;
  options.cpus = plan.cpus;
  options.message_fd = message[0];
  if (impl_->containment != nullptr) {
    options.cgroup_procs_fd = impl_->containment->cgroup_procs_fd();
    options.cgroup_dir_fd = impl_->containment->cgroup_dir_fd();
  }
  SpawnedWorker s;
  try {
    s = spawn_worker(plan.argv, plan.env, options);
  } catch (const std::exception& e) {
    ::close(message[0]);
    ::close(message[1]);
    log_line("local rank " + std::to_string(local_rank) + ": no standby (" + e.what() + ")");
    return;
  }
  ::close(message[0]);
  ::fcntl(message[1], F_SETFL, ::fcntl(message[1], F_GETFL) | O_NONBLOCK);
  if (impl_->containment != nullptr) impl_->containment->standby_started(s.pid);
  slot = std::make_shared<Standby>(impl_->io, s, local_rank, plan, message[1], impl_->log);
  impl_->watch_exit(slot);
  impl_->watch_stream(slot, slot->out);
  impl_->watch_stream(slot, slot->err);
}

StandbyPool::Taken StandbyPool::take(int local_rank, const WorkerLaunchPlan& worker) {
  auto& slot = impl_->standbys.at(static_cast<std::size_t>(local_rank));
  if (!slot) return {};
  const std::shared_ptr<Standby> sb = std::move(slot);
  slot.reset();
  Taken t;
  if (!sb->exited) impl_->reaped(*sb);  // ended, its exit not yet seen on the loop
  if (sb->exited) {
    t.why = "its standby ended (" + sb->why + ")";
    return t;
  }
  if (const std::string misfit = standby_misfit(sb->plan, worker); !misfit.empty()) {
    impl_->kill_and_reap(*sb);
    t.why = "its standby cannot take this start: " + misfit;
    return t;
  }
  // What it printed as a standby is the log's, not the worker's: read before the message, after
  // which it prints as the worker.
  impl_->drain(sb->out, 64);
  impl_->drain(sb->err, 64);
  sb->out.router.finish();
  sb->err.router.finish();
  const std::string message = standby_message(worker);
  // Room for the whole message, so that the write never blocks the loop nor stops halfway.
  if (message.size() > 65536) ::fcntl(sb->message_fd, F_SETPIPE_SZ, static_cast<int>(message.size()));
  ssize_t n;
  do {
    n = ::write(sb->message_fd, message.data(), message.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(message.size())) {
    const std::string what = n < 0 ? std::string(std::strerror(errno)) : "the pipe took " + std::to_string(n) + " of " +
                                                                              std::to_string(message.size()) + " bytes";
    impl_->kill_and_reap(*sb);
    t.why = sb->exited && !sb->why.empty() ? "its standby ended (" + sb->why + ")"
                                           : "its standby could not be given the launch (" + what + ")";
    return t;
  }
  close_fd(sb->message_fd);
  sb->closed = true;
  SpawnedWorker w;
  w.pid = sb->pid;
  w.pidfd = sb->pidfd.release();
  w.stdout_fd = sb->out.pipe.release();
  w.stderr_fd = sb->err.pipe.release();
  if (impl_->containment != nullptr) impl_->containment->standby_taken(w.pid);
  t.worker = w;
  return t;
}

std::vector<bool> StandbyPool::kept() const {
  std::vector<bool> out;
  for (const auto& sb : impl_->standbys) out.push_back(sb != nullptr);
  return out;
}

}  // namespace crun
