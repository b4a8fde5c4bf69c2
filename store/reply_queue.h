// ReplyQueue: the bytes queued for one connection's socket, in order: bytes copied into text()
// and, between them, stored values referenced instead of copied (store/shared_value.h), so that
// many replies of one large value hold its bytes once.
//
// Contract
//   - Bytes written into text() follow everything queued before; append_shared(v) places v's
//     bytes after everything queued so far.
//   - size() counts every byte the socket is to get (shared values in full); text_size() the
//     copied ones. gather(from, ...) describes the bytes from offset `from` on as iovecs for one
//     sendmsg() (at most `max`: call again from where that one stopped).
//   - With a budget, each shared value referenced is counted in it (ReplyBudget::share) from
//     append_shared() until clear() or the queue's end; swap() exchanges two queues' contents
//     (both of one budget), so moving queued bytes to the socket's side changes no count.
//   - clear() keeps text()'s room for reuse.
//
// Threading
//   The server's event-loop thread only.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "store/shared_value.h"

namespace crun {

class ReplyBudget;

class ReplyQueue {
 public:
  explicit ReplyQueue(ReplyBudget* budget = nullptr) : budget_(budget) {}
  ~ReplyQueue() { release_shared(); }
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;

  std::string& text() { return text_; }
  const std::string& text() const { return text_; }
  void append_shared(std::shared_ptr<const SharedValue> value);

  std::size_t size() const { return text_.size() + shared_bytes_; }
  std::size_t text_size() const { return text_.size(); }
  bool empty() const { return text_.empty() && shared_.empty(); }
  bool has_shared() const { return !shared_.empty(); }

  void clear() {
    text_.clear();
    if (!shared_.empty()) release_shared();
  }
  void swap(ReplyQueue& other);
  std::size_t gather(std::size_t from, iovec* iov, std::size_t max) const;
  // Appends every queued byte to `to` (copies: for tests, not for the socket).
  void copy_to(std::string& to) const;

 private:
  struct Piece {
    std::size_t at;  // the value's bytes go after text_[0, at)
    std::shared_ptr<const SharedValue> value;
  };
  void release_shared();

  ReplyBudget* budget_;
  std::string text_;
  std::vector<Piece> shared_;
  std::size_t shared_bytes_ = 0;
};

}  // namespace crun
