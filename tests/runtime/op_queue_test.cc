// OpQueue::run and the bucketer's last bucket: an operation its caller waits for at once runs on
// the caller's thread, after everything issued before it, with the queue's usual errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "worker_runtime/bucketer.h"
#include "worker_runtime/op_queue.h"

using namespace crun::rt;

TEST_CASE("run() on an idle queue runs on the calling thread", "[op_queue]") {
  OpQueue q;
  std::thread::id ran_on;
  q.run("probe", [&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("run() comes after the operations submitted before it", "[op_queue]") {
  OpQueue q;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](const char* what) {
    std::lock_guard lk(mu);
    order.emplace_back(what);
  };
  WorkPtr first = q.submit("first", [&] {
    // Bounded: the test releases it as soon as run() has been called.
    released.wait_for(std::chrono::seconds(10));
    note("first");
  });
  WorkPtr second = q.submit("second", [&] { note("second"); });
  std::thread releaser([&] {
    std::this_thread::yield();
    release.set_value();
  });
  q.run("third", [&] { note("third"); });
  releaser.join();
  CHECK(second->is_completed());
  first->wait();
  CHECK(order == std::vector<std::string>{"first", "second", "third"});
}

TEST_CASE("run() rethrows a failure under the operation's name, and the queue stays broken", "[op_queue]") {
  OpQueue q;
  try {
    q.run("gloo all_reduce(float32 x 4) sum", [] { throw std::runtime_error("peer 1 closed the connection"); });
    FAIL("run() did not throw");
  } catch (const CollectiveError& e) {
    CHECK(std::string(e.what()) == "gloo all_reduce(float32 x 4) sum failed: peer 1 closed the connection");
  }
  bool ran = false;
  CHECK_THROWS_WITH(q.run("next", [&] { ran = true; }),
                    Catch::Contains("next: process group is broken by an earlier failure"));
  CHECK_FALSE(ran);
  CHECK_THROWS_AS(q.submit("later", [] {})->wait(), CollectiveError);
}

TEST_CASE("run() on a queue without a thread (world size 1)", "[op_queue]") {
  OpQueue q(/*inline_only=*/true);
  int runs = 0;
  q.run("a", [&] { ++runs; });
  q.submit("b", [&] { ++runs; })->wait();
  CHECK(runs == 2);
}

namespace {

// A group of one rank that records which call carried each all_reduce, and on which thread.
class RecordingGroup final : public ProcessGroup {
 public:
  struct Call {
    std::size_t count;
    bool now;
    std::thread::id thread;
  };
  std::vector<Call> calls;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "recording"; }
  Millis default_timeout() const override { return Millis(1000); }
  WorkPtr all_reduce(void*, std::size_t count, DType, ReduceOp, Millis) override {
    calls.push_back({count, false, std::this_thread::get_id()});
    return queue_.submit("all_reduce", [] {});
  }
  void all_reduce_now(void*, std::size_t count, DType, ReduceOp, Millis) override {
    calls.push_back({count, true, std::this_thread::get_id()});
  }
  WorkPtr broadcast(void*, std::size_t, DType, int, Millis) override { return unused(); }
  WorkPtr reduce(void*, std::size_t, DType, ReduceOp, int, Millis) override { return unused(); }
  WorkPtr all_gather(const void*, void*, std::size_t, DType, Millis) override { return unused(); }
  WorkPtr gather(const void*, void*, std::size_t, DType, int, Millis) override { return unused(); }
  WorkPtr scatter(const void*, void*, std::size_t, DType, int, Millis) override { return unused(); }
  WorkPtr reduce_scatter(const void*, void*, std::size_t, DType, ReduceOp, Millis) override { return unused(); }
  WorkPtr barrier(Millis) override { return unused(); }
  WorkPtr send(const void*, std::size_t, DType, int, std::uint32_t, Millis) override { return unused(); }
  WorkPtr recv(void*, std::size_t, DType, int, std::uint32_t, Millis) override { return unused(); }

 private:
  static WorkPtr unused() { throw std::logic_error("not used by the bucketer"); }
  OpQueue queue_{/*inline_only=*/true};
};

}  // namespace

TEST_CASE("the bucketer all-reduces its last bucket in wait_all, on the calling thread", "[op_queue]") {
  RecordingGroup g;
  std::vector<std::vector<float>> grads{std::vector<float>(300), std::vector<float>(20), std::vector<float>(200),
                                        std::vector<float>(10)};
  std::vector<std::span<float>> spans(grads.begin(), grads.end());
  GradBucketer b(g, spans, 800);  // reverse order: {10, 200} then {20, 300}
  REQUIRE(b.num_buckets() == 2);
  for (int step = 0; step < 2; ++step) {
    g.calls.clear();
    for (std::size_t k = grads.size(); k-- > 0;) b.mark_ready(k);
    REQUIRE(g.calls.size() == 1);  // the first bucket, launched as soon as it was whole
    CHECK(g.calls[0].count == 210);
    CHECK_FALSE(g.calls[0].now);
    b.wait_all();
    REQUIRE(g.calls.size() == 2);
    CHECK(g.calls[1].count == 320);
    CHECK(g.calls[1].now);
    CHECK(g.calls[1].thread == std::this_thread::get_id());
  }
  b.mark_ready(0);
  CHECK_THROWS_AS(b.wait_all(), std::logic_error);
}
