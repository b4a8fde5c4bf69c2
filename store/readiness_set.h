// ReadinessSet: the store server's connections, watched through an epoll instance of their own
// that the server's io_context waits on as one descriptor.
//
// Why not Asio's async_read_some on each socket: Boost 1.81's epoll reactor tries every read
// with a recv() first and takes a descriptor for drained only at end of file, so a request/reply
// connection paid a recv() that failed with EAGAIN on most requests (0.78 a request with 16
// clients: `git show b56c1a0:docs/benchmarks.md`, "The store's reads: a failed recv() after most
// replies"), a system call the bare epoll echo does not make. Here a connection is read only
// after epoll said it has input.
//
// Contract
//   - add(fd, watcher): fd is watched edge-triggered for input (EPOLLIN, EPOLLRDHUP; EPOLLERR and
//     EPOLLHUP always): watcher->on_ready(events) is called when input arrives, and soon after
//     add() when some is there already. Edge-triggered: the watcher reads until recv() comes back
//     short (or EAGAIN), or remembers that it did not and reads on by itself. False (errno set)
//     when the kernel refuses the descriptor (out of memory, fs.epoll.max_user_watches).
//   - want_output(fd, watcher, on): also (on) or no longer (off) calls it when fd turns writable
//     (EPOLLOUT); false (errno set) when the kernel refuses.
//   - remove(fd, watcher): no call for it after this one returns, including for events already
//     taken from the kernel in the batch being delivered. Call it before closing fd.
//   - One wake delivers at most kBatch events; then the io_context runs its other handlers and the
//     rest follow on its next turn.
//   - close(): no more calls to any watcher, and no wait left on the io_context (a server that
//     stops lets its loop run out of work). Destroying the set closes it. Watchers are not owned.
//   - Its epoll descriptor is close-on-exec.
//
// Threading
//   The io_context's thread, or before that thread runs the io_context (construction).
#pragma once

#include <cstdint>
#include <memory>

namespace boost::asio {
class io_context;
}

namespace crun {

class ReadinessSet {
 public:
  static constexpr int kBatch = 64;

  class Watcher {
   public:
    // `events`: the epoll bits that were reported (EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLERR, EPOLLHUP).
    virtual void on_ready(std::uint32_t events) = 0;

   protected:
    ~Watcher() = default;
  };

  // Throws std::system_error when no epoll instance can be created.
  explicit ReadinessSet(boost::asio::io_context& io);
  ~ReadinessSet();
  ReadinessSet(const ReadinessSet&) = delete;
  ReadinessSet& operator=(const ReadinessSet&) = delete;

  bool add(int fd, Watcher* watcher);
  bool want_output(int fd, Watcher* watcher, bool on);
  void remove(int fd, Watcher* watcher);
  void close();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace crun
