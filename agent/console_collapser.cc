#include "agent/console_collapser.h"

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/console_sink.h"

namespace crun {

namespace asio = boost::asio;
using Clock = LineCollapse::Clock;

struct ConsoleCollapser::Impl {
  Impl(asio::io_context& io, ConsoleSink& s, LineCollapse::Limits limits) : sink(s), collapse(limits), timer(io) {}

  ConsoleSink& sink;
  LineCollapse collapse;
  asio::steady_timer timer;
  std::optional<Clock::time_point> armed;  // the window end the timer waits for
  std::string out;                         // what goes to the sink, one write per call

  // Writes what was let go and arms the timer for the oldest held line, when that changed.
  void done() {
    if (!out.empty()) {
      sink.write(out.data(), out.size());
      out.clear();
    }
    const auto next = collapse.next_deadline();
    if (!next || next == armed) return;
    armed = next;
    timer.expires_at(*next);  // cancels the previous wait, whose handler sees operation_aborted
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      armed.reset();
      collapse.expire(Clock::now(), out);
      done();
    });
  }
};

ConsoleCollapser::ConsoleCollapser(asio::io_context& io, ConsoleSink& sink, LineCollapse::Limits limits)
    : impl_(std::make_unique<Impl>(io, sink, limits)) {}

ConsoleCollapser::~ConsoleCollapser() = default;

void ConsoleCollapser::begin(const std::vector<bool>& shown, LineCollapse::Prefix prefix) {
  impl_->collapse.begin(shown, std::move(prefix), impl_->out);
  impl_->done();
}

void ConsoleCollapser::lines(int local_rank, const char* data, std::size_t size) {
  const auto now = Clock::now();
  std::size_t pos = 0;
  while (pos < size) {
    const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', size - pos));
    const std::size_t end = nl ? static_cast<std::size_t>(nl - data) + 1 : size;
    impl_->collapse.add(local_rank, std::string_view(data + pos, end - pos), now, impl_->out);
    pos = end;
  }
  impl_->done();
}

void ConsoleCollapser::end_rank(int local_rank) {
  impl_->collapse.end_rank(local_rank, Clock::now(), impl_->out);
  impl_->done();
}

void ConsoleCollapser::flush() {
  impl_->collapse.flush(impl_->out);
  impl_->done();
}

}  // namespace crun
