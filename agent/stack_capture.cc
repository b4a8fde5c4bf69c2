#include "agent/stack_capture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/bounded_command.h"
#include "agent/flight_dump.h"
#include "agent/stack_text.h"

namespace crun {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// True when `pid` has a handler for `signo` now (/proc/PID/status SigCgt): the dump signal goes
// only to a worker that would catch it; its default action ends the process.
bool catches_signal(int pid, int signo) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  std::string text;
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 65536;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto at = text.find("\nSigCgt:");
  if (at == std::string::npos) return false;
  const unsigned long long caught = std::strtoull(text.c_str() + at + 8, nullptr, 16);
  return signo >= 1 && signo <= 64 && ((caught >> (signo - 1)) & 1ULL) != 0;
}

constexpr std::chrono::milliseconds kQuiet{100};  // no write for this long: the dump is over

// The first `limit` bytes of `path` ("" when unreadable).
std::string read_head(const std::string& path, std::size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[16384];
  while (text.size() < limit) {
    const ssize_t n = ::read(fd, buffer, std::min(sizeof buffer, limit - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

std::string bound_text(std::chrono::milliseconds bound) {
  const auto ms = bound.count();
  return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(ms % 1000 / 100) : "") + " s";
}

struct StackCapture::Batch : std::enable_shared_from_this<StackCapture::Batch> {
  struct Slot {
    Slot(asio::io_context& io) : quiet(io), python_limit(io) {}
    CaptureTarget target;
    RankStack stack;
    int watch = -1;                          // its dump file's watch in the batch's inotify, while awaited
    asio::steady_timer quiet;                // kQuiet after the last write
    asio::steady_timer python_limit;         // half the bound
    bool python_waiting = false;
    std::unique_ptr<BoundedCommand> native;
    bool done = false;
  };

  Batch(asio::io_context& io, StackCaptureOptions o) : io(io), options(std::move(o)), notify(io) {}
  asio::io_context& io;
  StackCaptureOptions options;
  Clock::time_point deadline;
  std::vector<std::unique_ptr<Slot>> slots;
  std::unique_ptr<FlightDumps> flight;  // while the flight recorder dumps are awaited
  std::vector<std::size_t> flight_slots;  // the slots whose dump was asked for, in the requests' order
  std::size_t left = 0;  // slots not finished, and the flight recorder's part while it runs
  bool over = false;  // abandoned (destructor) or finished
  std::function<void(std::vector<RankStack>)> done;
  // One inotify instance for every dump awaited (the user's instances are few: 128 by default),
  // open while any is; each file one watch.
  asio::posix::stream_descriptor notify;
  std::map<int, Slot*> watched;

  void start() {
    start_flight();
    for (auto& slot : slots) {
      Slot& s = *slot;
      s.stack.rank = s.target.rank;
      s.stack.local_rank = s.target.local_rank;
      s.stack.pid = s.target.pid;
      if (!start_python(s)) start_native(s);
    }
  }

  // The NCCL flight recorder dumps, alongside the stacks: one more part `done` waits for.
  void start_flight() {
    std::vector<FlightRequest> requests;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (slots[i]->target.flight_pipe.empty()) continue;
      requests.push_back({slots[i]->target.flight_pipe, slots[i]->target.flight_dump});
      flight_slots.push_back(i);
    }
    if (requests.empty()) return;
    ++left;
    flight = std::make_unique<FlightDumps>(io);
    flight->run(std::move(requests), deadline, options.timeout, [self = shared_from_this()](std::vector<FlightDump> dumps) {
      if (self->over) return;
      for (std::size_t k = 0; k < dumps.size() && k < self->flight_slots.size(); ++k) {
        RankStack& stack = self->slots[self->flight_slots[k]]->stack;
        stack.flight_dump = std::move(dumps[k].path);
        stack.flight_dump_bytes = dumps[k].bytes;
        stack.flight_error = std::move(dumps[k].error);
      }
      self->part_done();
    });
  }

  // Sends the dump signal when the worker registered for it; false when no dump is awaited.
  bool start_python(Slot& s) {
    if (s.target.python_dump.empty() || options.python_signal <= 0) return false;
    // A worker that exec'd another program keeps its pid and its file but not the handler.
    if (!catches_signal(s.target.pid, options.python_signal)) return false;
    const int file = ::open(s.target.python_dump.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (file < 0) return false;  // not registered (yet): a signal would end it
    ::close(file);
    if (!notify.is_open()) {
      const int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
      if (in < 0) {
        s.stack.error = "Python stack: inotify: " + std::string(std::strerror(errno));
        return false;
      }
      notify.assign(in);
      watch_dumps();
    }
    s.watch = ::inotify_add_watch(notify.native_handle(), s.target.python_dump.c_str(), IN_MODIFY);
    if (s.watch < 0) {
      s.stack.error = "Python stack: inotify: " + std::string(std::strerror(errno));
      close_python(s);
      return false;
    }
    watched[s.watch] = &s;
    if (::kill(s.target.pid, options.python_signal) != 0) {
      s.stack.error = "Python stack: " + std::string(std::strerror(errno));
      close_python(s);
      return false;
    }
    s.python_waiting = true;
    auto self = shared_from_this();
    s.python_limit.expires_after(options.timeout / 2);
    s.python_limit.async_wait([self, &s](const boost::system::error_code& ec) {
      if (ec || self->over || !s.python_waiting) return;
      self->python_over(s, /*in_time=*/false);
    });
    return true;
  }

  // Reads the batch's inotify while it is open: each dump file written to is looked at again.
  void watch_dumps() {
    notify.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->over || !self->notify.is_open()) return;
      std::set<Slot*> written;
      alignas(struct inotify_event) char events[4096];
      for (ssize_t n; (n = ::read(self->notify.native_handle(), events, sizeof events)) > 0;) {
        for (ssize_t at = 0; at < n;) {
          const auto* e = reinterpret_cast<const struct inotify_event*>(events + at);
          at += static_cast<ssize_t>(sizeof(struct inotify_event) + e->len);
          if (auto it = self->watched.find(e->wd); it != self->watched.end()) written.insert(it->second);
        }
      }
      for (Slot* s : written) {
        if (s->python_waiting) self->dump_written(*s);
      }
      if (self->notify.is_open()) self->watch_dumps();
    });
  }

  void dump_written(Slot& s) {
    if (faulthandler_done(read_head(s.target.python_dump, kBytesPerRank))) {
      python_over(s, /*in_time=*/true);
      return;
    }
    s.quiet.expires_after(kQuiet);  // a later write cancels and re-arms it
    s.quiet.async_wait([self = shared_from_this(), &s](const boost::system::error_code& ec) {
      if (ec || self->over || !s.python_waiting) return;
      self->python_over(s, /*in_time=*/true);
    });
  }

  void close_python(Slot& s) {
    s.python_waiting = false;
    if (s.watch >= 0) {
      watched.erase(s.watch);
      if (notify.is_open()) ::inotify_rm_watch(notify.native_handle(), s.watch);
      s.watch = -1;
    }
    if (watched.empty() && notify.is_open()) {  // the last dump awaited: the instance goes
      boost::system::error_code ignored;
      notify.close(ignored);
    }
    s.quiet.cancel();
    s.python_limit.cancel();
  }

  void python_over(Slot& s, bool in_time) {
    close_python(s);
    const std::string text = read_head(s.target.python_dump, kBytesPerRank);
    s.stack.python_threads = parse_faulthandler(text);
    if (!in_time && s.stack.python_threads.empty()) s.stack.error = "Python stack: timed out after " + bound_text(options.timeout / 2);
    start_native(s);
  }

  void start_native(Slot& s) {
    if (options.eu_stack.empty()) {  // not installed: what the Python dump gave, if anything
      if (s.stack.python_threads.empty() && s.stack.error.empty()) s.stack.error = "eu-stack not found";
      finish(s);
      return;
    }
    const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left_ms.count() <= 0) {
      s.stack.error = "timed out after " + bound_text(options.timeout);
      finish(s);
      return;
    }
    s.native = std::make_unique<BoundedCommand>(io, left_ms, BoundedCommand::Keep::kHead, kBytesPerRank, options.containment);
    s.native->run({options.eu_stack, "-s", "-i", "-m", "-p", std::to_string(s.target.pid)},
                  [self = shared_from_this(), &s](BoundedResult r) {
                    if (self->over) return;
                    std::string complaint;
                    s.stack.threads = parse_eu_stack(r.output, &complaint);
                    bool any_frame = false;
                    for (const auto& t : s.stack.threads) any_frame = any_frame || !t.empty();
                    if (!any_frame) s.stack.threads.clear();  // "TID n:" lines, then why not (another tracer)
                    std::string error;
                    if (r.timed_out) error = "timed out after " + bound_text(self->options.timeout);
                    else if (!r.status) error = "eu-stack " + r.start_error;
                    else if (s.stack.threads.empty()) error = "eu-stack: " + (complaint.empty() ? r.status->describe() : complaint);
                    if (!error.empty()) s.stack.error = s.stack.error.empty() ? error : error + "; " + s.stack.error;
                    self->finish(s);
                  });
  }

  void finish(Slot& s) {
    if (s.done) return;
    s.done = true;
    part_done();
  }

  void part_done() {
    if (--left > 0) return;
    over = true;
    std::vector<RankStack> stacks;
    for (auto& slot : slots) stacks.push_back(std::move(slot->stack));
    auto callback = std::move(done);
    // Off this stack: the BoundedCommand that called us is still on it.
    asio::post(io, [callback = std::move(callback), stacks = std::move(stacks), self = shared_from_this()]() mutable {
      callback(std::move(stacks));
    });
  }

  void abandon() {
    over = true;
    flight.reset();  // its waits stop
    for (auto& slot : slots) {
      close_python(*slot);
      slot->native.reset();  // kills eu-stack
    }
  }
};

StackCapture::StackCapture(asio::io_context& io, StackCaptureOptions options) : io_(io), options_(std::move(options)) {}

StackCapture::~StackCapture() {
  if (batch_ && !batch_->over) batch_->abandon();
}

bool StackCapture::running() const { return batch_ && !batch_->over; }

bool StackCapture::run(std::vector<CaptureTarget> targets, std::function<void(std::vector<RankStack>)> done) {
  if (running()) return false;
  batch_ = std::make_shared<Batch>(io_, options_);
  batch_->done = std::move(done);
  batch_->deadline = Clock::now() + options_.timeout;
  for (auto& t : targets) {
    batch_->slots.push_back(std::make_unique<Batch::Slot>(io_));
    batch_->slots.back()->target = std::move(t);
  }
  batch_->left = batch_->slots.size();
  if (batch_->left == 0) {
    batch_->over = true;
    asio::post(io_, [done = std::move(batch_->done)] { done({}); });
    return true;
  }
  batch_->start();
  return true;
}

}  // namespace crun
