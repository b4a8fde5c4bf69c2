// store/reply_budget and store/reply_queue: the bound on replies queued over all connections
// (heaviest evicted first, a shared value counted once), and a queue that references values.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "store/reply_budget.h"
#include "store/reply_queue.h"
#include "store/shared_value.h"

using namespace crun;

namespace {

// A connection's session as the budget sees it: evict() drops what it holds, as a session does.
struct FakeHolder : ReplyBudget::Holder {
  FakeHolder(ReplyBudget& b, std::string n) : budget(b), name(std::move(n)) { budget.enter(*this); }
  ~FakeHolder() override { budget.leave(*this); }
  void evict(std::size_t weight, std::size_t bound) override {
    evicted.push_back(name + " " + std::to_string(weight) + "/" + std::to_string(bound));
    queue.clear();
  }
  void hold(std::size_t own, std::size_t weight) { budget.hold(*this, own, weight); }
  ReplyBudget& budget;
  std::string name;
  ReplyQueue queue{&budget};
  static inline std::vector<std::string> evicted;
};

std::shared_ptr<const SharedValue> value_of(std::size_t n, char c) {
  auto v = std::make_shared<SharedValue>();
  v->bytes.assign(n, c);
  return v;
}

}  // namespace

TEST_CASE("over the bound, the heaviest holder is evicted first, until the total fits", "[reply_budget]") {
  FakeHolder::evicted.clear();
  ReplyBudget budget(100);
  FakeHolder a(budget, "a"), b(budget, "b"), c(budget, "c");
  a.hold(30, 30);
  b.hold(50, 50);
  c.hold(10, 10);
  budget.enforce();
  CHECK(FakeHolder::evicted.empty());
  CHECK(budget.total() == 90);
  c.hold(40, 40);  // 120 now: b (50) goes, 70 is left
  budget.enforce();
  REQUIRE(FakeHolder::evicted == std::vector<std::string>{"b 50/100"});
  CHECK(budget.total() == 70);
  CHECK(budget.holders() == 2);
  b.hold(500, 500);  // evicted: no longer counted
  budget.enforce();
  CHECK(budget.total() == 70);
  CHECK(FakeHolder::evicted.size() == 1);
}

TEST_CASE("a shared value counts once however many queues reference it", "[reply_budget]") {
  FakeHolder::evicted.clear();
  ReplyBudget budget(100);
  FakeHolder a(budget, "a"), b(budget, "b");
  auto v = value_of(60, 'v');
  a.queue.append_shared(v);
  a.queue.append_shared(v);
  b.queue.append_shared(v);
  a.hold(0, 120);  // its weight counts the value each time it would be sent
  b.hold(0, 60);
  budget.enforce();
  CHECK(budget.total() == 60);
  CHECK(FakeHolder::evicted.empty());
  // A second value, referenced by b only: 130 > 100. b is the heaviest (130) and goes; the first
  // value stays, a still references it.
  b.queue.append_shared(value_of(70, 'w'));
  b.hold(0, 130);
  budget.enforce();
  CHECK(FakeHolder::evicted == std::vector<std::string>{"b 130/100"});
  CHECK(budget.total() == 60);  // a's references remain
  a.queue.clear();
  CHECK(budget.total() == 0);
  CHECK(v->queued_replies == 0);
}

TEST_CASE("the heaviest is the one with the most bytes to send, not the most copied", "[reply_budget]") {
  FakeHolder::evicted.clear();
  ReplyBudget budget(100);
  FakeHolder reader(budget, "copies"), sharer(budget, "shares");
  reader.hold(40, 40);
  auto v = value_of(70, 'v');
  sharer.queue.append_shared(v);
  sharer.queue.append_shared(v);
  sharer.hold(0, 140);
  budget.enforce();
  CHECK(FakeHolder::evicted == std::vector<std::string>{"shares 140/100"});
  CHECK(budget.total() == 40);
}

TEST_CASE("a bound of 0 bounds nothing", "[reply_budget]") {
  FakeHolder::evicted.clear();
  ReplyBudget budget(0);
  FakeHolder a(budget, "a");
  a.hold(std::size_t{1} << 40, std::size_t{1} << 40);
  budget.enforce();
  CHECK(FakeHolder::evicted.empty());
}

TEST_CASE("a reply queue sends copied bytes and shared values in order, from any offset", "[reply_budget]") {
  ReplyQueue q;
  auto v = value_of(5, 'v');
  q.text() = "ab";
  q.append_shared(v);
  q.text() += "cd";
  q.append_shared(v);
  q.append_shared(value_of(3, 'w'));
  q.text() += "e";
  REQUIRE(q.size() == 2 + 5 + 2 + 5 + 3 + 1);
  CHECK(q.text_size() == 5);
  const std::string all = "abvvvvvcdvvvvvwwwe";
  std::string copied;
  q.copy_to(copied);
  CHECK(copied == all);
  for (std::size_t from = 0; from <= all.size(); ++from) {
    for (std::size_t max : {std::size_t{1}, std::size_t{2}, std::size_t{64}}) {
      std::string sent;
      std::size_t at = from;
      while (at < all.size()) {  // as a socket that takes every iovec it is given
        iovec iov[64];
        const std::size_t n = q.gather(at, iov, max);
        REQUIRE(n > 0);
        REQUIRE(n <= max);
        for (std::size_t i = 0; i < n; ++i) {
          sent.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
          at += iov[i].iov_len;
        }
      }
      CHECK(sent == all.substr(from));
    }
  }
  ReplyQueue other;
  other.swap(q);
  CHECK(q.empty());
  CHECK(other.size() == all.size());
  other.clear();
  CHECK(other.empty());
}
