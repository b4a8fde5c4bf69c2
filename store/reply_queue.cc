#include "store/reply_queue.h"

#include "store/reply_budget.h"

namespace crun {

void ReplyQueue::append_shared(std::shared_ptr<const SharedValue> value) {
  if (budget_ != nullptr) budget_->share(*value);
  shared_bytes_ += value->bytes.size();
  shared_.push_back(Piece{text_.size(), std::move(value)});
}

void ReplyQueue::release_shared() {
  if (budget_ != nullptr) {
    for (const Piece& p : shared_) budget_->unshare(*p.value);
  }
  shared_.clear();
  shared_bytes_ = 0;
}

void ReplyQueue::swap(ReplyQueue& other) {
  text_.swap(other.text_);
  shared_.swap(other.shared_);
  std::swap(shared_bytes_, other.shared_bytes_);
}

std::size_t ReplyQueue::gather(std::size_t from, iovec* iov, std::size_t max) const {
  std::size_t n = 0;
  std::size_t pos = 0;  // offset of the next segment in the queue's bytes
  auto add = [&](const char* data, std::size_t len) {
    const std::size_t end = pos + len;
    if (len != 0 && from < end && n < max) {
      const std::size_t skip = from > pos ? from - pos : 0;
      iov[n].iov_base = const_cast<char*>(data + skip);
      iov[n].iov_len = len - skip;
      ++n;
    }
    pos = end;
  };
  std::size_t text_at = 0;
  for (const Piece& p : shared_) {
    add(text_.data() + text_at, p.at - text_at);
    text_at = p.at;
    add(p.value->bytes.data(), p.value->bytes.size());
    if (n == max) return n;
  }
  add(text_.data() + text_at, text_.size() - text_at);
  return n;
}

void ReplyQueue::copy_to(std::string& to) const {
  std::size_t text_at = 0;
  for (const Piece& p : shared_) {
    to.append(text_, text_at, p.at - text_at);
    to.append(p.value->bytes);
    text_at = p.at;
  }
  to.append(text_, text_at);
}

}  // namespace crun
