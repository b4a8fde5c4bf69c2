// ReplyBudget: the server-wide bound on the bytes of replies queued for connections that have not
// taken them yet (the sum over connections; each connection also has its own limit,
// SessionLimits::max_outbound_bytes).
//
// Contract
//   - Each connection's session is a Holder, in the account from enter() to leave(). hold(h, own,
//     weight) records what it holds now: `own`, the reply bytes copied into its queues, and
//     `weight`, every byte it still has to send, each shared value in full. A SharedValue that any
//     queue references counts once, from its first reference to its last (share()/unshare(),
//     called by ReplyQueue).
//   - total() = the holders' own bytes + the bytes of the shared values referenced.
//   - enforce(): while total() is over the bound, the heaviest holder (the largest weight: the
//     connection that has taken the fewest of its replies) is taken out of the account, its bytes
//     no longer counted, and then its evict() runs, which must let go of its queued replies. It is
//     meant for after a holder queued more; hold() and share() never evict.
//   - A bound of 0 means none. Picking the heaviest walks the holders: it costs O(connections)
//     once per eviction, nothing otherwise.
//
// Threading
//   One thread (the server's event loop), like the sessions it accounts for.
#pragma once

#include <cstddef>
#include <vector>

namespace crun {

struct SharedValue;

class ReplyBudget {
 public:
  class Holder {
   public:
    virtual ~Holder() = default;
    // Called once, out of the account already: drop the queued replies (the connection closes).
    // `weight` is what it held, `bound` the bound that was passed.
    virtual void evict(std::size_t weight, std::size_t bound) = 0;

   private:
    friend class ReplyBudget;
    static constexpr std::size_t kOut = static_cast<std::size_t>(-1);
    std::size_t own_ = 0;
    std::size_t weight_ = 0;
    std::size_t slot_ = kOut;  // its index in holders_, kOut when not in the account
  };

  explicit ReplyBudget(std::size_t bound) : bound_(bound) {}
  ReplyBudget(const ReplyBudget&) = delete;
  ReplyBudget& operator=(const ReplyBudget&) = delete;

  void enter(Holder& h);
  void leave(Holder& h);
  // No effect on a holder that is not in the account (it left, or was evicted).
  void hold(Holder& h, std::size_t own, std::size_t weight) {
    if (h.slot_ == Holder::kOut) return;
    own_total_ = own_total_ - h.own_ + own;
    h.own_ = own;
    h.weight_ = weight;
  }
  void share(const SharedValue& value);
  void unshare(const SharedValue& value);
  void enforce() {
    if (bound_ != 0 && total() > bound_) evict_over_bound();
  }

  std::size_t total() const { return own_total_ + shared_total_; }
  std::size_t bound() const { return bound_; }
  std::size_t holders() const { return holders_.size(); }

 private:
  void evict_over_bound();
  std::size_t bound_;
  std::size_t own_total_ = 0;
  std::size_t shared_total_ = 0;
  std::vector<Holder*> holders_;
  bool evicting_ = false;
};

}  // namespace crun
