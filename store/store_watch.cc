// open_store_watch (behind TcpStore::watch): a dedicated connection and reader thread per watch.
#include <atomic>
#include <thread>

#include "store/store_client.h"
#include "base/quiet_thread.h"
#include "store/store_connection.h"

namespace crun {

namespace {

class TcpStoreWatch final : public StoreWatch {
 public:
  TcpStoreWatch(const StoreEndpoint& endpoint, const StoreClientOptions& options, std::string prefix,
                std::function<void(const StoreEvent&)> on_event, std::function<void(const std::string&)> on_lost)
      : conn_(endpoint, options), on_event_(std::move(on_event)), on_lost_(std::move(on_lost)) {
    std::string out;
    wire::Writer w(out);
    std::size_t at = w.begin_frame(static_cast<std::uint8_t>(wire::Op::kWatch), 1);
    w.str(prefix);
    w.finish_frame(at);
    auto deadline = Clock::now() + options.timeout;
    conn_.send(out, deadline);
    auto reply = conn_.receive(deadline);
    if (reply.status != wire::Status::kOk) {
      throw StoreRejected(static_cast<int>(reply.status), conn_.name() + ": watch '" + prefix + "' refused: " + wire::status_name(reply.status));
    }
    thread_ = quiet_thread([this] { run(); });
  }

  ~TcpStoreWatch() override {
    stopping_ = true;
    conn_.interrupt();
    thread_.join();
  }

 private:
  void run() {
    try {
      for (;;) {
        auto reply = conn_.receive(Clock::time_point::max());
        if (reply.status != wire::Status::kNotify) continue;
        wire::Reader r(reply.payload);
        StoreEvent event;
        event.kind = static_cast<StoreEvent::Kind>(r.u8());
        event.key = std::string(r.str());
        event.value = std::string(r.str());
        on_event_(event);
      }
    } catch (const std::exception& e) {
      if (!stopping_ && on_lost_) on_lost_(e.what());
    }
  }

  StoreConnection conn_;
  std::function<void(const StoreEvent&)> on_event_;
  std::function<void(const std::string&)> on_lost_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<StoreWatch> open_store_watch(const StoreEndpoint& endpoint, const StoreClientOptions& options,
                                             std::string prefix, std::function<void(const StoreEvent&)> on_event,
                                             std::function<void(const std::string&)> on_lost) {
  return std::make_unique<TcpStoreWatch>(endpoint, options, std::move(prefix), std::move(on_event), std::move(on_lost));
}

}  // namespace crun
