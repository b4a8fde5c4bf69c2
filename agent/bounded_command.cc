#include "agent/bounded_command.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/worker_containment.h"
#include "agent/worker_env.h"
#include "agent/worker_process.h"

namespace crun {

namespace asio = boost::asio;

struct BoundedCommand::Running : std::enable_shared_from_this<BoundedCommand::Running> {
  Running(asio::io_context& io, const SpawnedWorker& s) : pid(s.pid), pidfd(io, s.pidfd), out(io, s.stdout_fd), timer(io) {}
  int pid;
  asio::posix::stream_descriptor pidfd;
  asio::posix::stream_descriptor out;  // stdout and stderr together
  asio::steady_timer timer;
  Keep keep = Keep::kTail;
  std::size_t bytes = 0;
  BoundedResult result;
  bool over = false;
  std::function<void(BoundedResult)> done;
  WorkerContainment* containment = nullptr;

  std::optional<ExitStatus> reap() {
    auto status = reap_worker(pid, pidfd.native_handle());
    if (status && containment != nullptr) containment->worker_reaped(pid);
    return status;
  }

  void keep_bytes(const char* data, std::size_t n) {
    std::string& kept = result.output;
    if (keep == Keep::kHead) {
      const std::size_t room = bytes > kept.size() ? bytes - kept.size() : 0;
      kept.append(data, std::min(room, n));
      if (n > room) result.truncated = true;
      return;
    }
    kept.append(data, n);
    if (kept.size() > bytes) {
      kept.erase(0, kept.size() - bytes);
      result.truncated = true;
    }
  }

  // Reads what is there (at most `max_reads` reads): every byte read, only the bound kept.
  void drain(int max_reads) {
    char buffer[16384];
    for (int i = 0; out.is_open() && i < max_reads; ++i) {
      const ssize_t n = ::read(out.native_handle(), buffer, sizeof buffer);
      if (n > 0) {
        keep_bytes(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      boost::system::error_code ignored;
      out.close(ignored);
    }
  }

  void watch_output() {
    out.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->over) return;
      self->drain(16);
      if (self->out.is_open()) self->watch_output();
    });
  }

  void watch_exit() {
    pidfd.async_wait(asio::posix::stream_descriptor::wait_read, [r = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      if (r->over) {  // given up on (a second run(), the destructor): only reaped
        if (!r->reap()) r->watch_exit();
        return;
      }
      const auto status = r->reap();
      if (!status) {  // a spurious wakeup: not ended yet
        r->watch_exit();
        return;
      }
      r->drain(64);  // what it wrote before it ended (bounded: a grandchild may write on)
      r->stop();     // and whatever it left in its group
      r->result.status = status;
      auto done = std::move(r->done);
      done(std::move(r->result));
    });
  }

  void expire() {
    if (over || result.timed_out) return;
    result.timed_out = true;
    ::kill(-pid, SIGKILL);
  }

  void stop() {
    over = true;
    ::kill(-pid, SIGKILL);
    boost::system::error_code ignored;
    timer.cancel();
    out.close(ignored);
  }
};

BoundedCommand::BoundedCommand(asio::io_context& io, std::chrono::milliseconds timeout, Keep keep, std::size_t bytes,
                               WorkerContainment* containment)
    : io_(io), timeout_(timeout), keep_(keep), bytes_(bytes), containment_(containment) {}

BoundedCommand::~BoundedCommand() {
  if (!running_ || running_->over) return;
  running_->stop();
  // SIGKILLed: reaped if it has ended already (else the subreaper reaps it once it does).
  if (!running_->reap() && running_->containment != nullptr) running_->containment->worker_reaped(running_->pid);
}

void BoundedCommand::expire() {
  if (running_) running_->expire();
}

void BoundedCommand::run(const std::vector<std::string>& argv, std::function<void(BoundedResult)> done) {
  if (running_ && !running_->over) running_->stop();
  running_.reset();
  SpawnOptions options;
  options.program = argv.front();
  options.merge_stderr = true;  // one stream, in the order written
  SpawnedWorker s;
  try {
    s = spawn_worker(argv, current_environment(), options);
  } catch (const std::exception& e) {
    BoundedResult failed;
    failed.start_error = std::string("cannot start: ") + e.what();
    asio::post(io_, [done = std::move(done), failed = std::move(failed)]() mutable { done(std::move(failed)); });
    return;
  }
  // Known to the containment before the loop runs again: the subreaper's SIGCHLD handler (on this
  // loop) must not reap it, nor a group's end kill it.
  if (containment_ != nullptr) containment_->worker_started(s.pid);
  auto r = std::make_shared<Running>(io_, s);
  r->containment = containment_;
  r->keep = keep_;
  r->bytes = bytes_;
  r->done = std::move(done);
  running_ = r;
  r->watch_output();
  r->timer.expires_after(timeout_);
  r->timer.async_wait([r](const boost::system::error_code& ec) {
    if (ec || r->over) return;
    r->expire();
  });
  r->watch_exit();
}

}  // namespace crun
