#include "store/reply_budget.h"

#include "store/shared_value.h"

namespace crun {

void ReplyBudget::enter(Holder& h) {
  if (h.slot_ != Holder::kOut) return;
  h.slot_ = holders_.size();
  h.own_ = 0;
  h.weight_ = 0;
  holders_.push_back(&h);
}

void ReplyBudget::leave(Holder& h) {
  if (h.slot_ == Holder::kOut) return;
  own_total_ -= h.own_;
  h.own_ = 0;
  Holder* last = holders_.back();
  holders_[h.slot_] = last;
  last->slot_ = h.slot_;
  holders_.pop_back();
  h.slot_ = Holder::kOut;
}

void ReplyBudget::share(const SharedValue& value) {
  if (value.queued_replies++ == 0) shared_total_ += value.bytes.size();
}

void ReplyBudget::unshare(const SharedValue& value) {
  if (--value.queued_replies == 0) shared_total_ -= value.bytes.size();
}

// An eviction releases what the evicted connection held alone; a shared value that others hold
// too still counts, so the loop goes on to the next heaviest until the total fits.
void ReplyBudget::evict_over_bound() {
  if (evicting_) return;  // an evict() that queues more: the outer loop goes on
  evicting_ = true;
  while (total() > bound_ && !holders_.empty()) {
    Holder* heaviest = holders_.front();
    for (Holder* h : holders_) {
      if (h->weight_ > heaviest->weight_) heaviest = h;
    }
    const std::size_t weight = heaviest->weight_;
    leave(*heaviest);
    heaviest->evict(weight, bound_);
  }
  evicting_ = false;
}

}  // namespace crun
