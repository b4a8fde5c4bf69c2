#include "agent/worker_group.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/console_sink.h"
#include "agent/worker_containment.h"
#include "agent/worker_process.h"

namespace crun {

namespace asio = boost::asio;

namespace {

struct Stream {
  Stream(asio::io_context& io, int fd, StreamRoute route) : pipe(io, fd), router(std::move(route)) {}
  asio::posix::stream_descriptor pipe;
  LineRouter router;
  bool open = true;
};

struct Worker {
  Worker(asio::io_context& io, const SpawnedWorker& s, WorkerLaunch& launch)
      : pid(s.pid),
        pidfd(io, s.pidfd),
        out(io, s.stdout_fd, std::move(launch.stdout_route)),
        err(io, s.stderr_fd, std::move(launch.stderr_route)) {}
  int local_rank = 0;
  int pid;
  asio::posix::stream_descriptor pidfd;
  Stream out;
  Stream err;
  bool exited = false;
  bool abandoned = false;  // SIGKILL could not end it: no longer watched or waited for
  bool closed = false;  // the group is gone: handlers must not touch it
};

}  // namespace

constexpr std::size_t kReadBytes = 65536;  // one read of a worker's output

struct WorkerGroup::Impl {
  Impl(asio::io_context& context, int restarts, ExitHandler exit_handler, WorkerContainment* worker_containment)
      : io(context), restart_count(restarts), on_exit(std::move(exit_handler)), containment(worker_containment) {}

  asio::io_context& io;
  int restart_count;
  ExitHandler on_exit;
  WorkerContainment* containment;
  std::vector<std::shared_ptr<Worker>> workers;
  // Uninitialised: only the bytes a read() writes are touched (zeroed, and copied from a
  // temporary Impl, it cost 32 page faults per group).
  std::unique_ptr<char[]> buffer = std::make_unique_for_overwrite<char[]>(kReadBytes);
  int running = 0;
  bool over = false;  // the rest of the workers' trees was killed

  // Every worker is reaped: kill what is left of their trees.
  void end_group() {
    if (over) return;
    over = true;
    for (auto& w : workers) ::kill(-w->pid, SIGKILL);  // grandchildren left in the workers' groups
    if (containment != nullptr) containment->group_over();
  }

  // Reads what is available now; closes the stream at EOF. Returns false at EOF/error.
  bool drain(Stream& s, int max_reads) {
    for (int i = 0; s.open && (max_reads < 0 || i < max_reads); ++i) {
      const ssize_t n = ::read(s.pipe.native_handle(), buffer.get(), kReadBytes);
      if (n > 0) {
        s.router.feed(buffer.get(), static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close_stream(s);
      return false;
    }
    return s.open;
  }

  void close_stream(Stream& s) {
    if (!s.open) return;
    s.open = false;
    s.router.finish();
    boost::system::error_code ignored;
    s.pipe.close(ignored);
  }

  void watch_stream(const std::shared_ptr<Worker>& w, Stream& s) {
    // A console that does not take what was read already: read on once it has (the worker then
    // waits on its full pipe, as it would writing to that console itself).
    if (ConsoleSink* console = s.router.console(); console != nullptr && console->backlogged()) {
      console->when_drained([this, w, &s] {
        if (!w->closed && s.open) watch_stream(w, s);
      });
      return;
    }
    s.pipe.async_wait(asio::posix::stream_descriptor::wait_read,
                      [this, w, &s](const boost::system::error_code& ec) {
                        if (ec || w->closed || !s.open) return;
                        // Collapsing, one read a turn: ranks that print the same lines fast
                        // reach the collapser together (agent/line_collapse.h's bound).
                        if (drain(s, s.router.collapsing() ? 1 : 16)) watch_stream(w, s);
                      });
  }

  void watch_exit(const std::shared_ptr<Worker>& w) {
    w->pidfd.async_wait(asio::posix::stream_descriptor::wait_read,
                        [this, w](const boost::system::error_code& ec) {
                          if (ec || w->closed || w->abandoned) return;
                          on_readable_pidfd(w);
                        });
  }

  void on_readable_pidfd(const std::shared_ptr<Worker>& w) {
    const auto status = reap_worker(w->pid, w->pidfd.native_handle());
    if (!status) {  // spurious wakeup
      watch_exit(w);
      return;
    }
    WorkerExit e;
    e.restart_count = restart_count;
    e.local_rank = w->local_rank;
    e.pid = w->pid;
    e.status = *status;
    e.when = AgentClock::now();
    e.wall_time = std::chrono::system_clock::now();
    w->exited = true;
    --running;
    boost::system::error_code ignored;
    w->pidfd.close(ignored);
    if (containment != nullptr) containment->worker_reaped(w->pid);
    // Everything the worker wrote is in the pipes now; route it before reporting the exit.
    // (A grandchild holding the pipe keeps it open: then we read what is there and go on.)
    drain(w->out, 64);  // bounded: a pipe holds at most 1 MiB, a grandchild may keep writing
    drain(w->err, 64);
    w->out.router.finish();
    w->err.router.finish();
    if (running == 0) end_group();
    on_exit(e);
  }

  // Reaps `w` if it ends within `deadline` (its pidfd polled; a worker SIGKILL cannot end, in
  // uninterruptible sleep, must not hang the agent); false when it did not.
  static bool reap_by(Worker& w, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid || (r < 0 && errno == ECHILD)) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{w.pidfd.native_handle(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
    }
  }

  void shutdown() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (auto& w : workers) {
      if (!w->exited) {
        ::kill(-w->pid, SIGKILL);
        ::kill(w->pid, SIGKILL);
        // An abandoned worker had its chance; the others get a bounded wait.
        if (w->abandoned) {
          ::waitpid(w->pid, nullptr, WNOHANG);  // reaped if it has ended meanwhile
          continue;
        }
        if (!reap_by(*w, deadline)) continue;  // left to the subreaper and the keeper
        w->exited = true;
        if (containment != nullptr) containment->worker_reaped(w->pid);
      }
    }
    end_group();
    for (auto& w : workers) {
      w->closed = true;
      boost::system::error_code ignored;
      w->pidfd.close(ignored);
      close_stream(w->out);
      close_stream(w->err);
    }
    workers.clear();
    running = 0;
  }
};

WorkerGroup::WorkerGroup(asio::io_context& io, int restart_count, ExitHandler on_exit, WorkerContainment* containment)
    : impl_(std::make_unique<Impl>(io, restart_count, std::move(on_exit), containment)) {}

WorkerGroup::~WorkerGroup() { impl_->shutdown(); }

void WorkerGroup::start(std::vector<WorkerLaunch> launches) {
  try {
    int local_rank = 0;
    SpawnOptions options;
    if (impl_->containment != nullptr) {
      options.cgroup_procs_fd = impl_->containment->cgroup_procs_fd();
      options.cgroup_dir_fd = impl_->containment->cgroup_dir_fd();
    }
    for (auto& launch : launches) {
      SpawnedWorker s;
      if (launch.adopted) {  // contained since it started as a standby
        s = *launch.adopted;
        launch.adopted.reset();
      } else {
        options.program = launch.program;
        options.cpus = launch.cpus;
        s = spawn_worker(launch.argv, launch.env, options);
        if (impl_->containment != nullptr) impl_->containment->worker_started(s.pid);
      }
      auto w = std::make_shared<Worker>(impl_->io, s, launch);
      w->local_rank = local_rank++;
      impl_->workers.push_back(w);
      ++impl_->running;
    }
  } catch (...) {
    for (auto& launch : launches) {  // taken from their standbys, not yet the group's
      if (!launch.adopted) continue;
      const SpawnedWorker& a = *launch.adopted;
      ::kill(-a.pid, SIGKILL);
      ::kill(a.pid, SIGKILL);
      for (int fd : {a.pidfd, a.stdout_fd, a.stderr_fd}) ::close(fd);
      ::waitpid(a.pid, nullptr, 0);
      if (impl_->containment != nullptr) impl_->containment->worker_reaped(a.pid);
    }
    impl_->shutdown();
    throw;
  }
  for (auto& w : impl_->workers) {
    impl_->watch_exit(w);
    impl_->watch_stream(w, w->out);
    impl_->watch_stream(w, w->err);
  }
}

void WorkerGroup::signal_all(int signo) {
  // A stopped process acts on no signal but SIGKILL until it is continued: without SIGCONT a
  // SIGSTOPped worker would sit out the whole --stop-timeout.
  const bool stop_signal = signo == SIGSTOP || signo == SIGTSTP || signo == SIGTTIN || signo == SIGTTOU;
  for (auto& w : impl_->workers) {
    ::kill(-w->pid, signo);
    if (!stop_signal && signo != SIGKILL && signo != SIGCONT) ::kill(-w->pid, SIGCONT);
  }
}

void WorkerGroup::kill_all() { signal_all(SIGKILL); }

std::vector<int> WorkerGroup::abandon() {
  std::vector<int> left;
  for (auto& w : impl_->workers) {
    if (w->exited || w->abandoned) continue;
    w->abandoned = true;
    left.push_back(w->local_rank);
    boost::system::error_code ignored;
    w->pidfd.cancel(ignored);  // its exit is no longer watched
    impl_->close_stream(w->out);
    impl_->close_stream(w->err);
    --impl_->running;
  }
  if (impl_->running == 0) impl_->end_group();
  return left;
}

int WorkerGroup::size() const { return static_cast<int>(impl_->workers.size()); }
int WorkerGroup::running() const { return impl_->running; }
int WorkerGroup::pid(int local_rank) const { return impl_->workers.at(local_rank)->pid; }
bool WorkerGroup::is_running(int local_rank) const {
  const auto& w = *impl_->workers.at(static_cast<std::size_t>(local_rank));
  return !w.exited && !w.abandoned;
}

const std::deque<std::string>& WorkerGroup::stderr_tail(int local_rank) const {
  return impl_->workers.at(local_rank)->err.router.tail();
}

}  // namespace crun
