#include "store/store_channel.h"

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

#include "base/quiet_thread.h"
#include "store/store_connection.h"

namespace crun {

namespace asio = boost::asio;

namespace {
using Fill = std::function<void(wire::Writer&)>;
// A reply's payload (valid during the call) or the error in its place.
using Raw = std::function<void(std::exception_ptr, std::string_view)>;

constexpr int kRepliesPerTurn = 256;  // on a loop: replies handled before it runs other work

std::string named(const char* op, const std::string& key) { return std::string(op) + " '" + key.substr(0, 200) + "'"; }

std::string decode_value(std::string_view payload) {
  wire::Reader r(payload);
  return std::string(r.str());
}

std::optional<std::string> decode_maybe_value(std::string_view payload) {
  wire::Reader r(payload);
  const bool found = r.u8() != 0;
  const std::string_view value = r.str();
  if (!found) return std::nullopt;
  return std::string(value);
}

std::vector<std::string> decode_keys(std::string_view payload) {
  wire::Reader r(payload);
  const std::uint32_t n = r.count(4);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
  return keys;
}

Fill key_value(const std::string& key, std::string_view value) {
  return [&key, value](wire::Writer& w) {
    w.str(key);
    w.str(value);
  };
}

Fill key_wait(const std::string& key, Millis wait) {
  const auto wire_wait = static_cast<std::uint32_t>(std::clamp<long long>(wait.count(), 0, wire::kForever));
  return [&key, wire_wait](wire::Writer& w) {
    w.str(key);
    w.u32(wire_wait);
  };
}

Fill prefix_limit(const std::string& prefix, std::uint32_t limit) {
  return [&prefix, limit](wire::Writer& w) {
    w.str(prefix);
    w.u32(limit);
  };
}
}  // namespace

struct StoreChannel::Impl {
  Impl(const StoreEndpoint& ep, const StoreClientOptions& opt, std::function<void(const std::string&)> lost,
       std::function<void()> connected)
      : endpoint(ep), options(opt), name("store " + ep.str()), on_lost(std::move(lost)), on_connected(std::move(connected)) {
    options.cancel = cancel;  // the destructor ends a connect retry loop
  }

  struct Pending {
    std::string what;
    Clock::time_point deadline;
    Raw done;
  };

  StoreEndpoint endpoint;
  StoreClientOptions options;
  std::string name;
  std::function<void(const std::string&)> on_lost;
  std::function<void()> on_connected;
  std::shared_ptr<ConnectCancel> cancel = std::make_shared<ConnectCancel>();

  std::mutex mu;  // everything below but what send_mu guards
  std::condition_variable cv;
  std::map<std::uint32_t, Pending> pending;
  std::map<std::uint32_t, std::function<void(const StoreEvent&)>> watches;  // never erased
  std::uint32_t next_id = 1;
  std::string broken;  // why it is unusable
  std::exception_ptr failure;  // what made it so
  bool closing = false;
  std::unique_ptr<StoreConnection> adopted;  // a connection made by the owner: the I/O thread's to use
  std::unique_ptr<StoreConnection> conn;  // set once by the I/O thread
  bool handshaken = false;                // the server accepted the hello
  std::string send_failed;                // a send that failed before the hello was answered
  Clock::time_point timer_at = Clock::time_point::max();
  std::function<void()> timer_fn;

  std::mutex send_mu;    // one frame on the wire at a time
  bool connected = false;  // guarded by send_mu: frames go to the socket, not to `queued`
  std::string queued;      // guarded by send_mu: frames made before the handshake
  std::thread::id corker;  // guarded by send_mu: the thread inside corked(), whose frames wait in `cork`
  std::string cork;        // guarded by send_mu

  std::thread io;

  // On the owner's loop instead (no thread): the connection's readability and one timer there.
  asio::io_context* loop = nullptr;
  std::unique_ptr<asio::posix::stream_descriptor> readable;  // a duplicate of the connection's socket
  std::unique_ptr<asio::steady_timer> timer;
  Clock::time_point timer_armed = Clock::time_point::max();
  bool reading = false;
  std::shared_ptr<int> life = std::make_shared<int>(0);  // a handler may outlive the channel

  // Registers the request, then writes its frame (or queues it before the handshake). Returns its
  // id, 0 when the channel was already unusable (`done` then ran at once).
  std::uint32_t start(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline, Raw done,
                      std::function<void(const StoreEvent&)>* on_event) {
    std::uint32_t id = 0;
    {
      std::unique_lock lock(mu);
      if (!broken.empty() || closing) {
        // A store never reached fails a late request as it failed the early ones (a refusal stays one).
        std::exception_ptr error = !closing && !handshaken ? failure : nullptr;
        const std::string why = closing ? std::string("the channel is closing") : broken;
        lock.unlock();
        if (!error) error = std::make_exception_ptr(StoreConnectionError(name + ": " + what + ": connection unusable (" + why + ")"));
        if (done) done(error, {});
        return 0;
      }
      id = next_id++;
      pending.emplace(id, Pending{what, deadline, std::move(done)});
      // A watch's handler stays even when its request fails: the server may have registered it.
      if (on_event != nullptr) watches[id] = std::move(*on_event);
    }
    std::string frame;
    wire::Writer writer(frame);
    const std::size_t at = writer.begin_frame(static_cast<std::uint8_t>(op), id);
    fill(writer);
    writer.finish_frame(at);
    transmit(frame, deadline);
    if (loop != nullptr) schedule();
    return id;
  }

  // Runs `body`; the frames this thread makes meanwhile go out in one write after it.
  void corked(const std::function<void()>& body) {
    bool claimed = false;
    {
      std::lock_guard lock(send_mu);
      // Already inside, or another thread is: then this body's frames go out one by one.
      claimed = corker == std::thread::id();
      if (claimed) corker = std::this_thread::get_id();
    }
    body();
    if (claimed) uncork();
  }

  void uncork() {
    std::string frames;
    {
      std::lock_guard lock(send_mu);
      corker = std::thread::id();
      frames.swap(cork);
    }
    if (!frames.empty()) transmit(frames, Clock::now() + options.timeout);
  }

  void transmit(const std::string& frame, Clock::time_point deadline) {
    std::lock_guard lock(send_mu);
    if (corker == std::this_thread::get_id()) {
      cork += frame;
      return;
    }
    if (!connected) {
      queued += frame;
      return;
    }
    try {
      conn->send(frame, deadline);
    } catch (const StoreError& e) {
      // Part of a frame may have gone: the stream is out of step. The I/O thread fails the rest.
      // Before the hello is answered it is left to read the answer: a server that refused
      // (wrong token, at its limit) closed the connection, which is why the send failed, and
      // the refusal, not the send, says why.
      bool answered = false;
      {
        std::lock_guard guard(mu);
        answered = handshaken;
        std::string& why = answered ? broken : send_failed;
        if (why.empty()) why = e.what();
      }
      if (answered) conn->interrupt();
    }
  }

  // Synchronous: waits for the reply of a request started here.
  std::string request(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline,
                      const std::atomic<bool>* cancel_flag, std::function<void(const StoreEvent&)>* on_event) {
    if (loop != nullptr) throw std::logic_error("StoreChannel on a loop: " + what + " must be asynchronous");
    if (cancel_flag != nullptr && *cancel_flag) throw StoreConnectionError(name + ": " + what + ": cancelled");
    struct Result {
      bool done = false;
      std::exception_ptr error;
      std::string payload;
    };
    auto result = std::make_shared<Result>();
    const std::uint32_t id = start(op, what, fill, deadline, [this, result](std::exception_ptr e, std::string_view p) {
      std::lock_guard lock(mu);
      result->done = true;
      result->error = std::move(e);
      result->payload = std::string(p);
      cv.notify_all();
    }, on_event);
    std::unique_lock lock(mu);
    while (!result->done) {
      if (!broken.empty()) {
        pending.erase(id);
        throw StoreConnectionError(name + ": " + what + ": " + broken);
      }
      if (cancel_flag != nullptr && *cancel_flag) {
        pending.erase(id);
        throw StoreConnectionError(name + ": " + what + ": cancelled");
      }
      if (deadline == Clock::time_point::max()) {
        cv.wait(lock);
      } else if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !result->done) {
        pending.erase(id);  // a late reply finds nobody waiting and is dropped: the stream stays in step
        throw StoreTimeout(name + ": " + what + ": no reply within the deadline (server stalled or unreachable)");
      }
    }
    lock.unlock();
    if (result->error) std::rethrow_exception(result->error);
    return std::move(result->payload);
  }

  // One first write: the hello, the frames made before the connection, what on_connected
  // makes, and what other threads make meanwhile, in that order; the server's answer to the
  // hello comes before any reply. Throws StoreTimeout when the server does not read.
  void first_write() {
    {
      std::lock_guard lock(send_mu);
      corker = std::this_thread::get_id();
      cork = StoreConnection::hello(options) + queued;
      std::string().swap(queued);
    }
    if (on_connected) on_connected();
    std::lock_guard lock(send_mu);
    corker = std::thread::id();
    cork += queued;
    std::string().swap(queued);
    connected = true;
    try {
      conn->send(cork, Clock::now() + options.timeout);  // others wait for send_mu: order kept
    } catch (const StoreTimeout&) {
      throw;  // the server does not read: no answer is coming either
    } catch (const StoreError& e) {
      std::lock_guard guard(mu);
      send_failed = e.what();  // a server at its limit answers and closes before the hello comes
    }
    std::string().swap(cork);
  }

  // The I/O thread: connect, send what was queued, then replies to their requests, notifications
  // to their watches, expired deadlines and the timer.
  void run() {
    std::string why;
    std::exception_ptr unreached;  // why the connection could not be made (StoreConnectionError, StoreRejected)
    try {
      auto made = adopted ? std::move(adopted)
                          : std::make_unique<StoreConnection>(endpoint, options, StoreConnection::Handshake::kPipelined);
      {
        std::lock_guard lock(mu);
        if (closing) throw StoreConnectionError(name + ": the channel is closing");
        conn = std::move(made);
      }
      first_write();
      take_answer(true);
      bool usable = false;
      {
        std::lock_guard lock(mu);
        handshaken = true;
        if (broken.empty()) broken = send_failed;  // accepted, but a frame did not go whole
        usable = broken.empty();
      }
      // Timer wakes and the channel's own close are the loop's ordinary events: no exception
      // (unwinding cost each agent's end ~30 us and three page faults of unwind tables).
      while (usable) {
        StoreConnection::Reply reply{};
        const auto w = conn->receive_or_stop(next_wake(), reply);
        if (w == StoreConnection::Wait::kInterrupted) break;
        if (w == StoreConnection::Wait::kReply) dispatch(reply);
        expire_and_tick();
      }
      // Interrupted: by the destructor, or by a send that failed half-way (it said why); or a
      // send failed before the server accepted the hello.
      std::lock_guard lock(mu);
      why = broken.empty() ? name + ": the channel is closing" : broken;
      if (!failure) failure = std::make_exception_ptr(StoreConnectionError(why));
    } catch (const std::exception& e) {
      why = e.what();
      std::lock_guard lock(mu);
      if (!handshaken) unreached = std::current_exception();
      if (!failure) failure = handshaken ? std::make_exception_ptr(StoreConnectionError(why)) : unreached;
    }
    fail_all(why, unreached);
  }

  // The server's answer to the hello: waited for, or (on a loop) taken when it is all here;
  // false when it is not yet. A refusal says why a send before it failed; another end of the
  // connection leaves the send's own error as the reason.
  bool take_answer(bool wait) {
    try {
      if (!wait) return conn->try_hello();
      conn->await_hello();
      return true;
    } catch (const StoreRejected&) {
      throw;
    } catch (const StoreError&) {
      std::string failed;
      {
        std::lock_guard lock(mu);
        failed = send_failed;
      }
      if (!failed.empty()) throw StoreConnectionError(failed);
      throw;
    }
  }

  Clock::time_point next_wake() {
    std::lock_guard lock(mu);
    Clock::time_point wake = timer_at;
    for (const auto& [id, p] : pending) wake = std::min(wake, p.deadline);
    return wake;
  }

  // On the loop: what run() does on the I/O thread, one event at a time.
  void start_on_loop() {
    try {
      {
        std::lock_guard lock(mu);
        if (closing) return;
        conn = std::move(adopted);
      }
      first_write();
      const int dup = ::fcntl(conn->fd(), F_DUPFD_CLOEXEC, 3);
      if (dup < 0) throw StoreConnectionError(name + ": cannot watch the connection: " + std::strerror(errno));
      readable = std::make_unique<asio::posix::stream_descriptor>(*loop, dup);
      timer = std::make_unique<asio::steady_timer>(*loop);
    } catch (const std::exception& e) {
      fail_on_loop(e.what());
      return;
    }
    read_on_loop();
    schedule();
  }

  void read_on_loop() {
    if (reading) return;
    reading = true;
    std::weak_ptr<int> alive = life;
    readable->async_wait(asio::posix::stream_descriptor::wait_read, [this, alive](const boost::system::error_code& ec) {
      if (alive.expired()) return;
      reading = false;
      if (!ec) on_readable();
    });
  }

  void on_readable() {
    int taken = 0;
    try {
      bool answered = false;
      {
        std::lock_guard lock(mu);
        answered = handshaken;
      }
      if (!answered) {
        if (!take_answer(false)) return read_on_loop();
        std::lock_guard lock(mu);
        handshaken = true;
        if (broken.empty()) broken = send_failed;
        if (!broken.empty()) throw StoreConnectionError(broken);
      }
      // A bounded batch a turn: a flood of notifications does not hold the loop; what is left
      // (maybe already read into the connection's buffer, where no wait would see it) next turn.
      StoreConnection::Reply reply{};
      while (taken < kRepliesPerTurn && conn->try_receive(reply)) {
        ++taken;
        dispatch(reply);
        std::lock_guard lock(mu);
        if (closing || !broken.empty()) break;
      }
      std::string failed;
      {
        std::lock_guard lock(mu);
        if (closing) return;
        failed = broken;
      }
      if (!failed.empty()) return fail_on_loop(failed);
    } catch (const std::exception& e) {
      std::string why = e.what();
      {
        std::lock_guard lock(mu);
        if (!broken.empty()) why = broken;  // a failed send shut the connection down: that is why
      }
      return fail_on_loop(why);
    }
    expire_and_tick();
    if (taken == kRepliesPerTurn) {
      std::weak_ptr<int> alive = life;
      asio::post(*loop, [this, alive] {
        if (!alive.expired()) on_readable();
      });
    } else {
      read_on_loop();
    }
    schedule();
  }

  void fail_on_loop(const std::string& why) {
    std::exception_ptr unreached;
    {
      std::lock_guard lock(mu);
      if (closing) return;
      if (!handshaken) unreached = failure ? failure : std::current_exception();
      if (!failure) failure = handshaken || !unreached ? std::make_exception_ptr(StoreConnectionError(why)) : unreached;
    }
    readable.reset();
    if (timer) timer->cancel();
    fail_all(why, unreached);
  }

  // The loop's timer at the earliest deadline or at(): set again when an earlier one comes.
  void schedule() {
    if (!timer) return;
    const Clock::time_point wake = next_wake();
    if (wake == timer_armed) return;
    timer_armed = wake;
    if (wake == Clock::time_point::max()) {
      timer->cancel();
      return;
    }
    timer->expires_at(wake);
    std::weak_ptr<int> alive = life;
    timer->async_wait([this, alive](const boost::system::error_code& ec) {
      if (alive.expired() || ec) return;
      timer_armed = Clock::time_point::max();
      expire_and_tick();
      schedule();
    });
  }

  void dispatch(const StoreConnection::Reply& reply) {
    if (reply.status == wire::Status::kNotify) {
      std::function<void(const StoreEvent&)>* handler = nullptr;
      {
        std::lock_guard lock(mu);
        if (closing) return;
        auto it = watches.find(reply.id);
        if (it != watches.end()) handler = &it->second;  // stable: map nodes stay put
      }
      if (handler == nullptr) return;
      wire::Reader r(reply.payload);
      StoreEvent event;
      event.kind = static_cast<StoreEvent::Kind>(r.u8());
      event.key = std::string(r.str());
      event.value = std::string(r.str());
      (*handler)(event);
      return;
    }
    Pending p;
    {
      std::lock_guard lock(mu);
      auto it = pending.find(reply.id);
      if (it == pending.end() || closing) return;  // its caller gave up (deadline, cancel)
      p = std::move(it->second);
      pending.erase(it);
    }
    std::exception_ptr error;
    if (reply.status != wire::Status::kOk) {
      try {
        raise_reply_error(name + ": " + p.what, reply.status, reply.payload);
      } catch (const StoreError&) {
        error = std::current_exception();
      }
    }
    if (p.done) p.done(error, error ? std::string_view() : reply.payload);
  }

  void expire_and_tick() {
    std::vector<Pending> expired;
    std::function<void()> tick;
    {
      std::lock_guard lock(mu);
      if (closing) return;
      const auto now = Clock::now();
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        expired.push_back(std::move(it->second));
        it = pending.erase(it);
      }
      if (timer_at <= now) {
        tick = std::move(timer_fn);
        timer_fn = nullptr;
        timer_at = Clock::time_point::max();
      }
    }
    for (auto& p : expired) {
      if (p.done) {
        const auto error = StoreTimeout(name + ": " + p.what + ": no reply within the deadline (server stalled or unreachable)");
        p.done(std::make_exception_ptr(error), {});
      }
    }
    if (tick) tick();
  }

  // Every pending request fails: with `unreached` itself when the handshake never completed.
  void fail_all(const std::string& why, std::exception_ptr unreached) {
    std::vector<Pending> failed;
    bool report = false;
    {
      std::lock_guard lock(mu);
      if (broken.empty()) broken = why;
      report = !closing;
      for (auto& [id, p] : pending) failed.push_back(std::move(p));
      pending.clear();
      cv.notify_all();
    }
    if (!report) return;
    for (auto& p : failed) {
      if (!p.done) continue;
      p.done(unreached ? unreached : std::make_exception_ptr(StoreConnectionError(name + ": " + p.what + ": " + why)), {});
    }
    if (on_lost) on_lost(why);
  }

  // The asynchronous form of each request: `decode` turns the OK payload into what `done` gets.
  template <typename T, typename Decode, typename Then>
  void async(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline, Decode decode, Then done) {
    start(op, what, fill, deadline, [this, what, decode, done = std::move(done)](std::exception_ptr e, std::string_view p) {
      T value{};
      if (!e) {
        try {
          value = decode(p);
        } catch (const wire::ProtocolError& bad) {
          e = std::make_exception_ptr(StoreConnectionError(name + ": " + what + ": malformed reply: " + bad.what()));
        }
      }
      done(e, std::move(value));
    }, nullptr);
  }
};

StoreChannel::StoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                           std::function<void(const std::string& why)> on_lost, std::function<void()> on_connected)
    : StoreChannel(nullptr, endpoint, options, std::move(on_lost), std::move(on_connected)) {}

StoreChannel::StoreChannel(std::unique_ptr<StoreConnection> connected, const StoreEndpoint& endpoint,
                           const StoreClientOptions& options, std::function<void(const std::string& why)> on_lost,
                           std::function<void()> on_connected)
    : impl_(std::make_unique<Impl>(endpoint, options, std::move(on_lost), std::move(on_connected))) {
  impl_->adopted = std::move(connected);
  impl_->io = quiet_thread([impl = impl_.get()] { impl->run(); });
}

StoreChannel::StoreChannel(asio::io_context* loop, std::unique_ptr<StoreConnection> connected,
                           const StoreEndpoint& endpoint, const StoreClientOptions& options,
                           std::function<void(const std::string& why)> on_lost, std::function<void()> on_connected)
    : impl_(std::make_unique<Impl>(endpoint, options, std::move(on_lost), std::move(on_connected))) {
  impl_->adopted = std::move(connected);
  if (loop == nullptr || !impl_->adopted) {
    impl_->io = quiet_thread([impl = impl_.get()] { impl->run(); });
    return;
  }
  impl_->loop = loop;
  std::weak_ptr<int> alive = impl_->life;
  asio::post(*loop, [impl = impl_.get(), alive] {
    if (!alive.expired()) impl->start_on_loop();
  });
}

StoreChannel::~StoreChannel() {
  if (impl_->loop != nullptr) {
    {
      std::lock_guard lock(impl_->mu);
      impl_->closing = true;
    }
    impl_->life.reset();  // handlers still queued on the loop find the channel gone
    return;               // the socket's duplicate, the timer and the connection close with impl_
  }
  {
    std::lock_guard lock(impl_->mu);
    impl_->closing = true;
    if (impl_->conn) impl_->conn->interrupt();
    impl_->cv.notify_all();
  }
  impl_->cancel->cancel();
  impl_->io.join();
}

void StoreChannel::set(const std::string& key, std::string_view value, Clock::time_point deadline, Done done) {
  impl_->start(wire::Op::kSet, named("set", key), key_value(key, value), deadline,
               [done = std::move(done)](std::exception_ptr e, std::string_view) { done(e); }, nullptr);
}

void StoreChannel::set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline, Done done) {
  impl_->start(wire::Op::kSetEphemeral, named("set_ephemeral", key), key_value(key, value), deadline,
               [done = std::move(done)](std::exception_ptr e, std::string_view) { done(e); }, nullptr);
}

void StoreChannel::get(const std::string& key, Millis wait, Clock::time_point deadline, GotValue done) {
  impl_->async<std::optional<std::string>>(wire::Op::kGet, named("get", key), key_wait(key, wait), deadline,
                                           [](std::string_view p) { return std::optional<std::string>(decode_value(p)); },
                                           std::move(done));
}

void StoreChannel::try_get(const std::string& key, Clock::time_point deadline, GotValue done) {
  impl_->async<std::optional<std::string>>(wire::Op::kTryGet, named("try_get", key),
                                           [&key](wire::Writer& w) { w.str(key); }, deadline, decode_maybe_value,
                                           std::move(done));
}

void StoreChannel::list_keys(const std::string& prefix, std::uint32_t limit, Clock::time_point deadline, GotKeys done) {
  impl_->async<std::vector<std::string>>(wire::Op::kListKeys, named("list_keys", prefix), prefix_limit(prefix, limit),
                                         deadline, decode_keys, std::move(done));
}

void StoreChannel::watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event,
                         Clock::time_point deadline, Done done) {
  impl_->start(wire::Op::kWatch, "watch '" + prefix + "'", [&](wire::Writer& w) { w.str(prefix); }, deadline,
               [done = std::move(done)](std::exception_ptr e, std::string_view) { done(e); }, &on_event);
}

void StoreChannel::corked(const std::function<void()>& body) { impl_->corked(body); }

void StoreChannel::at(Clock::time_point when, std::function<void()> fn) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->timer_at = when;
    impl_->timer_fn = std::move(fn);
  }
  if (impl_->loop != nullptr) impl_->schedule();
}

void StoreChannel::set(const std::string& key, std::string_view value, Clock::time_point deadline,
                       const std::atomic<bool>* cancel) {
  impl_->request(wire::Op::kSet, named("set", key), key_value(key, value), deadline, cancel, nullptr);
}

void StoreChannel::set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline,
                                 const std::atomic<bool>* cancel) {
  impl_->request(wire::Op::kSetEphemeral, named("set_ephemeral", key), key_value(key, value), deadline, cancel, nullptr);
}

std::string StoreChannel::get(const std::string& key, Millis wait, Clock::time_point deadline,
                              const std::atomic<bool>* cancel) {
  return decode_value(impl_->request(wire::Op::kGet, named("get", key), key_wait(key, wait), deadline, cancel, nullptr));
}

std::optional<std::string> StoreChannel::try_get(const std::string& key, Clock::time_point deadline,
                                                 const std::atomic<bool>* cancel) {
  return decode_maybe_value(
      impl_->request(wire::Op::kTryGet, named("try_get", key), [&](wire::Writer& w) { w.str(key); }, deadline, cancel, nullptr));
}

std::vector<std::string> StoreChannel::list_keys(const std::string& prefix, std::uint32_t limit,
                                                 Clock::time_point deadline) {
  return decode_keys(impl_->request(wire::Op::kListKeys, named("list_keys", prefix), prefix_limit(prefix, limit),
                                    deadline, nullptr, nullptr));
}

void StoreChannel::watch(const std::string& prefix, std::function<void(const StoreEvent&)> on_event,
                         Clock::time_point deadline) {
  impl_->request(wire::Op::kWatch, "watch '" + prefix + "'", [&](wire::Writer& w) { w.str(prefix); }, deadline, nullptr,
                 &on_event);
}

void StoreChannel::wake() {
  std::lock_guard lock(impl_->mu);
  impl_->cv.notify_all();
}

bool StoreChannel::reached() const {
  std::lock_guard lock(impl_->mu);
  return impl_->handshaken;
}

std::exception_ptr StoreChannel::failure() const {
  std::lock_guard lock(impl_->mu);
  return impl_->failure;
}

std::string StoreChannel::local_address() const {
  std::lock_guard lock(impl_->mu);
  return impl_->conn ? impl_->conn->local_address() : std::string();
}

}  // namespace crun
