#include "store/readiness_set.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <system_error>

namespace crun {

namespace asio = boost::asio;

namespace {
constexpr std::uint32_t kInput = EPOLLIN | EPOLLRDHUP | EPOLLET;
}

struct ReadinessSet::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(asio::io_context& io) : epoll(io) {}

  // One wait on the set's descriptor at a time. Its handler may run after the set is gone (the
  // io_context outlives a server embedded in it): it touches the set only through `alive`.
  void arm() {
    std::weak_ptr<Impl> alive = shared_from_this();
    epoll.async_wait(asio::posix::stream_descriptor::wait_read, [alive](const boost::system::error_code& ec) {
      const auto self = alive.lock();
      if (!self || ec || !self->epoll.is_open()) return;
      self->deliver();
    });
  }

  void deliver() {
    const int n = ::epoll_wait(epoll.native_handle(), batch.data(), kBatch, 0);
    taken = n > 0 ? n : 0;  // EINTR: nothing now; the wait below reports what is left
    for (next = 0; next < taken; ++next) {
      auto* watcher = static_cast<Watcher*>(batch[next].data.ptr);
      if (watcher != nullptr) watcher->on_ready(batch[next].events);
      if (!epoll.is_open()) return;  // a watcher closed the set
    }
    taken = next = 0;
    arm();
  }

  asio::posix::stream_descriptor epoll;
  std::array<epoll_event, kBatch> batch{};
  int taken = 0;  // events in `batch` from the last epoll_wait, delivered up to `next`
  int next = 0;
};

ReadinessSet::ReadinessSet(asio::io_context& io) : impl_(std::make_shared<Impl>(io)) {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "store server: epoll_create1");
  boost::system::error_code ec;
  impl_->epoll.assign(fd, ec);
  if (ec) {
    ::close(fd);
    throw std::system_error(ec.value(), std::generic_category(), "store server: watching its epoll descriptor");
  }
  impl_->arm();
}

ReadinessSet::~ReadinessSet() { close(); }

void ReadinessSet::close() {
  boost::system::error_code ec;
  impl_->epoll.close(ec);
  impl_->taken = impl_->next = 0;
}

bool ReadinessSet::add(int fd, Watcher* watcher) {
  epoll_event ev{};
  ev.events = kInput;
  ev.data.ptr = watcher;
  return ::epoll_ctl(impl_->epoll.native_handle(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

bool ReadinessSet::want_output(int fd, Watcher* watcher, bool on) {
  epoll_event ev{};
  ev.events = kInput | (on ? EPOLLOUT : 0u);
  ev.data.ptr = watcher;
  return ::epoll_ctl(impl_->epoll.native_handle(), EPOLL_CTL_MOD, fd, &ev) == 0;
}

void ReadinessSet::remove(int fd, Watcher* watcher) {
  if (impl_->epoll.is_open()) ::epoll_ctl(impl_->epoll.native_handle(), EPOLL_CTL_DEL, fd, nullptr);
  for (int i = impl_->next; i < impl_->taken; ++i) {
    if (impl_->batch[i].data.ptr == watcher) impl_->batch[i].data.ptr = nullptr;
  }
}

}  // namespace crun
