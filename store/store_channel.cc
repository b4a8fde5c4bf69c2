#include "store/store_channel.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "store/store_connection.h"

namespace crun {

struct StoreChannel::Impl {
  Impl(const StoreEndpoint& endpoint, const StoreClientOptions& options, std::function<void(const std::string&)> lost)
      : conn(endpoint, options), on_lost(std::move(lost)) {}

  struct Waiting {
    bool done = false;
    wire::Status status = wire::Status::kOk;
    std::string payload;
  };

  StoreConnection conn;
  std::function<void(const std::string&)> on_lost;
  std::mutex send_mu;  // one frame on the wire at a time
  std::mutex mu;       // the rest
  std::condition_variable cv;
  std::map<std::uint32_t, Waiting*> waiting;                                  // guarded by mu
  std::map<std::uint32_t, std::function<void(const StoreEvent&)>> watches;   // guarded by mu; never erased
  std::uint32_t next_id = 1;                                                  // guarded by mu
  std::string broken;                                                         // guarded by mu: why it is unusable
  std::atomic<bool> closing{false};
  std::thread reader;

  // The reader thread: replies to their waiting callers, notifications to their watches.
  void run() {
    try {
      for (;;) {
        const StoreConnection::Reply reply = conn.receive(Clock::time_point::max());
        if (reply.status == wire::Status::kNotify) {
          std::function<void(const StoreEvent&)>* handler = nullptr;
          {
            std::lock_guard lock(mu);
            auto it = watches.find(reply.id);
            if (it != watches.end()) handler = &it->second;  // stable: map nodes stay put
          }
          if (handler == nullptr) continue;
          wire::Reader r(reply.payload);
          StoreEvent event;
          event.kind = static_cast<StoreEvent::Kind>(r.u8());
          event.key = std::string(r.str());
          event.value = std::string(r.str());
          (*handler)(event);
          continue;
        }
        std::lock_guard lock(mu);
        auto it = waiting.find(reply.id);
        if (it == waiting.end()) continue;  // its caller gave up (deadline, cancel)
        it->second->done = true;
        it->second->status = reply.status;
        it->second->payload = std::string(reply.payload);
        waiting.erase(it);
        cv.notify_all();
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mu);
        if (broken.empty()) broken = e.what();
        cv.notify_all();
      }
      if (!closing && on_lost) on_lost(e.what());
    }
  }

  std::string request(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline,
                      const std::atomic<bool>* cancel, std::function<void(const StoreEvent&)>* on_event) {
    Waiting w;
    std::uint32_t id = 0;
    {
      std::lock_guard lock(mu);
      if (!broken.empty()) throw StoreConnectionError(conn.name() + ": " + what + ": connection unusable (" + broken + ")");
      if (cancel != nullptr && *cancel) throw StoreConnectionError(conn.name() + ": " + what + ": cancelled");
      id = next_id++;
      waiting[id] = &w;
      if (on_event != nullptr) watches[id] = std::move(*on_event);  // before any notification can come
    }
    // A watch's handler stays even when its request fails: the server may have registered it, and
    // the reader may be calling it (it lives as long as the channel, like what it captures).
    auto forget = [&] { waiting.erase(id); };
    std::string out;
    wire::Writer writer(out);
    const std::size_t at = writer.begin_frame(static_cast<std::uint8_t>(op), id);
    fill(writer);
    writer.finish_frame(at);
    try {
      std::lock_guard lock(send_mu);
      conn.send(out, deadline);
    } catch (const StoreError& e) {
      std::lock_guard lock(mu);
      forget();
      if (broken.empty()) broken = e.what();  // part of a frame may have gone: the stream is out of step
      cv.notify_all();
      throw;
    }
    std::unique_lock lock(mu);
    while (!w.done) {
      if (!broken.empty()) {
        forget();
        throw StoreConnectionError(conn.name() + ": " + what + ": " + broken);
      }
      if (cancel != nullptr && *cancel) {
        forget();
        throw StoreConnectionError(conn.name() + ": " + what + ": cancelled");
      }
      if (deadline == Clock::time_point::max()) {
        cv.wait(lock);
      } else if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !w.done) {
        forget();  // a late reply finds nobody waiting and is dropped: the stream stays in step
        throw StoreTimeout(conn.name() + ": " + what + ": no reply within the deadline (server stalled or unreachable)");
      }
    }
    lock.unlock();
    if (w.status != wire::Status::kOk) raise_reply_error(conn.name() + ": " + what, w.status, w.payload);
    return std::move(w.payload);
  }
};

StoreChannel::StoreChannel(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                           std::function<void(const std::string& why)> on_lost)
    : impl_(std::make_unique<Impl>(endpoint, options, std::move(on_lost))) {
  impl_->reader = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreChannel::~StoreChannel() {
  impl_->closing = true;
  impl_->conn.interrupt();
  impl_->reader.join();
}

std::string StoreChannel::request(wire::Op op, const std::string& what, const Fill& fill, Clock::time_point deadline,
                                  const std::atomic<bool>* cancel) {
  return impl_->request(op, what, fill, deadline, cancel, nullptr);
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

std::string StoreChannel::local_address() const { return impl_->conn.local_address(); }

namespace {
std::string named(const char* op, const std::string& key) { return std::string(op) + " '" + key.substr(0, 200) + "'"; }
}  // namespace

void StoreChannel::set(const std::string& key, std::string_view value, Clock::time_point deadline,
                       const std::atomic<bool>* cancel) {
  request(wire::Op::kSet, named("set", key), [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  }, deadline, cancel);
}

void StoreChannel::set_ephemeral(const std::string& key, std::string_view value, Clock::time_point deadline,
                                 const std::atomic<bool>* cancel) {
  request(wire::Op::kSetEphemeral, named("set_ephemeral", key), [&](wire::Writer& w) {
    w.str(key);
    w.str(value);
  },
          deadline, cancel);
}

std::string StoreChannel::get(const std::string& key, Millis wait, Clock::time_point deadline,
                              const std::atomic<bool>* cancel) {
  const auto wire_wait = static_cast<std::uint32_t>(std::clamp<long long>(wait.count(), 0, wire::kForever));
  const std::string payload = request(
      wire::Op::kGet, named("get", key), [&](wire::Writer& w) {
        w.str(key);
        w.u32(wire_wait);
      }, deadline, cancel);
  wire::Reader r(payload);
  return std::string(r.str());
}

std::optional<std::string> StoreChannel::try_get(const std::string& key, Clock::time_point deadline,
                                                 const std::atomic<bool>* cancel) {
  const std::string payload =
      request(wire::Op::kTryGet, named("try_get", key), [&](wire::Writer& w) { w.str(key); }, deadline, cancel);
  wire::Reader r(payload);
  const bool found = r.u8() != 0;
  const std::string_view value = r.str();
  if (!found) return std::nullopt;
  return std::string(value);
}

std::vector<std::string> StoreChannel::list_keys(const std::string& prefix, std::uint32_t limit,
                                                 Clock::time_point deadline) {
  const std::string payload = request(
      wire::Op::kListKeys, named("list_keys", prefix), [&](wire::Writer& w) {
        w.str(prefix);
        w.u32(limit);
      }, deadline);
  wire::Reader r(payload);
  const std::uint32_t n = r.count(4);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.emplace_back(r.str());
  return keys;
}

}  // namespace crun
