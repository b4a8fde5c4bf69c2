#include "store/store_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "base/quiet_thread.h"
#include "store/store_connection.h"

namespace crun {

namespace asio = boost::asio;

namespace {
using Fill = std::function<void(wire::Writer&)>;
// A reply's payload (valid during the call) or the error in its place.
using Raw = std::function<void(std::exception_ptr, std::string_view)>;

constexpr int kRepliesPerTurn = 256;  // replies handled before the loop runs other work

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
  Impl(asio::io_context& l, const StoreEndpoint& ep, const StoreClientOptions& opt,
       std::function<void(const std::string&)> lost, std::function<void()> connected)
      : loop(l),
        endpoint(ep),
        options(opt),
        name("store " + ep.str()),
        on_lost(std::move(lost)),
        on_connected(std::move(connected)),
        timer(l) {
    options.cancel = cancel;  // the destructor ends a connect retry loop
  }

  ~Impl() {
    life.reset();  // handlers still queued on the loop find the channel gone
    cancel->cancel();
    if (connector.joinable()) connector.join();
  }

  struct Pending {
    std::string what;
    Clock::time_point deadline;
    Raw done;
  };

  asio::io_context& loop;
  StoreEndpoint endpoint;
  StoreClientOptions options;
  std::string name;
  std::function<void(const std::string&)> on_lost;
  std::function<void()> on_connected;
  std::shared_ptr<ConnectCancel> cancel = std::make_shared<ConnectCancel>();
  std::thread connector;  // makes the connection when none was given, then ends

  std::map<std::uint32_t, Pending> pending;
  std::map<std::uint32_t, std::function<void(const StoreEvent&)>> watches;  // never erased
  std::uint32_t next_id = 1;
  std::string broken;          // why it is unusable
  std::exception_ptr failure;  // what made it so
  bool over = false;           // failed: on_lost ran, nothing more runs
  std::unique_ptr<StoreConnection> conn;
  bool connected = false;   // frames go to the socket, not to `queued`
  bool handshaken = false;  // the server accepted the hello
  std::string send_failed;  // a send that failed before the hello was answered
  std::string queued;       // frames made before the connection
  bool corking = false;     // inside corked() or on_connected: frames wait in `cork`
  std::string cork;
  Clock::time_point timer_at = Clock::time_point::max();  // at()
  std::function<void()> timer_fn;

  std::unique_ptr<asio::posix::stream_descriptor> readable;  // a duplicate of the connection's socket
  asio::steady_timer timer;  // at the earliest deadline or at()
  Clock::time_point timer_armed = Clock::time_point::max();
  bool reading = false;
  std::shared_ptr<int> life = std::make_shared<int>(0);  // a handler may outlive the channel

  // Runs `fn` on the loop later, unless the channel is gone by then.
  template <typename F>
  void later(F fn) {
    asio::post(loop, [alive = std::weak_ptr<int>(life), fn = std::move(fn)]() mutable {
      if (!alive.expired()) fn();
    });
  }

  // The connection, made on a helper thread; the loop takes it (or the reason there is none).
  void connect_aside() {
    connector = quiet_thread([this, alive = std::weak_ptr<int>(life)] {
      auto made = std::make_shared<std::unique_ptr<StoreConnection>>();
      std::exception_ptr error;
      std::string why;
      try {
        *made = std::make_unique<StoreConnection>(endpoint, options, StoreConnection::Handshake::kPipelined);
      } catch (const std::exception& e) {
        error = std::current_exception();
        why = e.what();
      }
      asio::post(loop, [this, alive, made, error, why] {
        if (alive.expired()) return;
        if (*made) return begin(std::move(*made));
        fail(why, error);
      });
    });
  }

  // Registers the request, then writes its frame (or keeps it before the connection). `done`
  // runs at once when the channel is already unusable.
  void start(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline, Raw done,
             std::function<void(const StoreEvent&)>* on_event) {
    if (!broken.empty()) {
      // A store never reached fails a late request as it failed the early ones (a refusal stays one).
      std::exception_ptr error = handshaken ? nullptr : failure;
      if (!error) error = std::make_exception_ptr(StoreConnectionError(name + ": " + what + ": connection unusable (" + broken + ")"));
      if (done) done(error, {});
      return;
    }
    const std::uint32_t id = next_id++;
    pending.emplace(id, Pending{what, deadline, std::move(done)});
    // A watch's handler stays even when its request fails: the server may have registered it.
    if (on_event != nullptr) watches[id] = std::move(*on_event);
    std::string frame;
    wire::Writer writer(frame);
    const std::size_t at = writer.begin_frame(static_cast<std::uint8_t>(op), id);
    fill(writer);
    writer.finish_frame(at);
    transmit(frame, deadline);
    schedule();
  }

  void corked(const std::function<void()>& body) {
    if (corking) return body();
    corking = true;
    body();
    corking = false;
    std::string frames;
    frames.swap(cork);
    if (!frames.empty()) transmit(frames, Clock::now() + options.timeout);
  }

  void transmit(const std::string& frame, Clock::time_point deadline) {
    if (corking || !connected) {
      (corking ? cork : queued) += frame;
      return;
    }
    try {
      conn->send(frame, deadline);
    } catch (const StoreError& e) {
      // Part of a frame may have gone: the stream is out of step; the connection is shut down and
      // its readability fails the rest. Before the hello is answered it is left to read the
      // answer: a server that refused (wrong token, at its limit) closed the connection, which
      // is why the send failed, and the refusal, not the send, says why.
      std::string& why = handshaken ? broken : send_failed;
      if (why.empty()) why = e.what();
      if (handshaken) conn->interrupt();
    }
  }

  // The connection is the loop's: one first write (the hello, the frames made before, what
  // on_connected makes), then replies as they come.
  void begin(std::unique_ptr<StoreConnection> made) {
    conn = std::move(made);
    try {
      corking = true;
      cork = StoreConnection::hello(options) + queued;
      std::string().swap(queued);
      if (on_connected) on_connected();
      corking = false;
      connected = true;
      std::string first;
      first.swap(cork);
      try {
        conn->send(first, Clock::now() + options.timeout);
      } catch (const StoreTimeout&) {
        throw;  // the server does not read: no answer is coming either
      } catch (const StoreError& e) {
        send_failed = e.what();  // a server at its limit answers and closes before the hello comes
      }
      const int dup = ::fcntl(conn->fd(), F_DUPFD_CLOEXEC, 3);
      if (dup < 0) throw StoreConnectionError(name + ": cannot watch the connection: " + std::strerror(errno));
      readable = std::make_unique<asio::posix::stream_descriptor>(loop, dup);
    } catch (const std::exception& e) {
      return fail(e.what(), std::current_exception());
    }
    read();
    schedule();
  }

  // The server's answer to the hello, when it is all here (false: not yet). A refusal says why
  // a send before it failed; another end of the connection leaves the send's own error as the reason.
  bool take_answer() {
    try {
      return conn->try_hello();
    } catch (const StoreRejected&) {
      throw;
    } catch (const StoreError&) {
      if (!send_failed.empty()) throw StoreConnectionError(send_failed);
      throw;
    }
  }

  void read() {
    if (reading) return;
    reading = true;
    readable->async_wait(asio::posix::stream_descriptor::wait_read,
                         [this, alive = std::weak_ptr<int>(life)](const boost::system::error_code& ec) {
      if (alive.expired()) return;
      reading = false;
      if (!ec) on_readable();
    });
  }

  void on_readable() {
    if (over) return;
    int taken = 0;
    try {
      if (!handshaken) {
        if (!take_answer()) return read();
        handshaken = true;
        if (broken.empty()) broken = send_failed;
        if (!broken.empty()) throw StoreConnectionError(broken);
      }
      // A bounded batch a turn; what is left (maybe already read into the connection's buffer,
      // where no wait would see it) next turn.
      StoreConnection::Reply reply{};
      while (taken < kRepliesPerTurn && broken.empty() && conn->try_receive(reply)) {
        ++taken;
        dispatch(reply);
      }
      if (!broken.empty()) throw StoreConnectionError(broken);  // a send failed half-way
    } catch (const std::exception& e) {
      // A failed send shut the connection down: that is why.
      return fail(broken.empty() ? std::string(e.what()) : broken, std::current_exception());
    }
    expire_and_tick();
    if (taken == kRepliesPerTurn) {
      later([this] { on_readable(); });
    } else {
      read();
    }
    schedule();
  }

  // Once: every pending request fails (with `cause` itself when the handshake never completed:
  // the connection could not be made, or the hello was refused), then on_lost.
  void fail(const std::string& why, std::exception_ptr cause) {
    if (over) return;
    over = true;
    const std::exception_ptr unreached = handshaken ? nullptr : (failure ? failure : cause);
    if (!failure) failure = unreached ? unreached : std::make_exception_ptr(StoreConnectionError(why));
    if (broken.empty()) broken = why;
    readable.reset();
    timer.cancel();
    std::map<std::uint32_t, Pending> failed;
    failed.swap(pending);
    for (auto& [id, p] : failed) {
      if (!p.done) continue;
      p.done(unreached ? unreached : std::make_exception_ptr(StoreConnectionError(name + ": " + p.what + ": " + why)), {});
    }
    if (on_lost) on_lost(why);
  }

  Clock::time_point next_wake() const {
    Clock::time_point wake = timer_at;
    for (const auto& [id, p] : pending) wake = std::min(wake, p.deadline);
    return wake;
  }

  // The timer at the earliest deadline or at(): set again when an earlier one comes.
  void schedule() {
    if (over) return;
    const Clock::time_point wake = next_wake();
    if (wake == timer_armed) return;
    timer_armed = wake;
    if (wake == Clock::time_point::max()) {
      timer.cancel();
      return;
    }
    timer.expires_at(wake);
    timer.async_wait([this, alive = std::weak_ptr<int>(life)](const boost::system::error_code& ec) {
      if (alive.expired() || ec) return;
      timer_armed = Clock::time_point::max();
      expire_and_tick();
      schedule();
    });
  }

  void dispatch(const StoreConnection::Reply& reply) {
    if (reply.status == wire::Status::kNotify) {
      auto it = watches.find(reply.id);
      if (it == watches.end()) return;
      wire::Reader r(reply.payload);
      StoreEvent event;
      event.kind = static_cast<StoreEvent::Kind>(r.u8());
      event.key = std::string(r.str());
      event.value = std::string(r.str());
      it->second(event);  // map nodes stay put: a watch made meanwhile does not move it
      return;
    }
    auto it = pending.find(reply.id);
    if (it == pending.end()) return;  // its deadline passed: dropped
    Pending p = std::move(it->second);
    pending.erase(it);
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
    if (over) return;
    const auto now = Clock::now();
    std::vector<Pending> expired;
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      expired.push_back(std::move(it->second));
      it = pending.erase(it);
    }
    std::function<void()> tick;
    if (timer_at <= now) {
      tick = std::move(timer_fn);
      timer_fn = nullptr;
      timer_at = Clock::time_point::max();
    }
    for (auto& p : expired) {
      if (!p.done) continue;
      const auto error = StoreTimeout(name + ": " + p.what + ": no reply within the deadline (server stalled or unreachable)");
      p.done(std::make_exception_ptr(error), {});
    }
    if (tick) tick();
  }

  // A request whose OK payload `decode` turns into what `done` gets.
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

StoreChannel::StoreChannel(asio::io_context& loop, std::unique_ptr<StoreConnection> connected,
                           const StoreEndpoint& endpoint, const StoreClientOptions& options,
                           std::function<void(const std::string& why)> on_lost, std::function<void()> on_connected)
    : impl_(std::make_unique<Impl>(loop, endpoint, options, std::move(on_lost), std::move(on_connected))) {
  if (!connected) {
    impl_->connect_aside();
    return;
  }
  auto made = std::make_shared<std::unique_ptr<StoreConnection>>(std::move(connected));
  impl_->later([impl = impl_.get(), made] { impl->begin(std::move(*made)); });  // nothing runs before the loop does
}

StoreChannel::~StoreChannel() = default;

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
  impl_->timer_at = when;
  impl_->timer_fn = std::move(fn);
  impl_->schedule();
}

bool StoreChannel::reached() const { return impl_->handshaken; }

std::exception_ptr StoreChannel::failure() const { return impl_->failure; }

std::string StoreChannel::local_address() const { return impl_->conn ? impl_->conn->local_address() : std::string(); }

}  // namespace crun
