// agent/stack_groups: ranks grouped by their stacks, the odd one out, capture errors, the bounds,
// merging the grouped forms of several nodes, and the JSON round trip.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "agent/stack_groups.h"
#include <nlohmann/json.hpp>

using namespace crun;

namespace {

RankStack python_rank(int rank, std::vector<std::string> main_thread) {
  RankStack s;
  s.rank = rank;
  s.local_rank = rank % 8;
  s.pid = 1000 + rank;
  // faulthandler lists the main thread last (agent/stack_text.h)
  s.python_threads = {{"wait (threading.py:320)", "run (pin_memory.py:50)"}, std::move(main_thread)};
  s.threads = {{"0x7f00" + std::to_string(rank) + " ??", "_PyEval_EvalFrameDefault"}};  // not compared for Python
  return s;
}

RankStack native_rank(int rank, std::vector<std::vector<std::string>> threads) {
  RankStack s;
  s.rank = rank;
  s.pid = 2000 + rank;
  s.threads = std::move(threads);
  return s;
}

const std::vector<std::string> kAllReduce = {"all_reduce (train.py:40)", "train_step (train.py:60)", "main (train.py:80)",
                                             "<module> (train.py:90)"};
const std::vector<std::string> kRead = {"read (loader.py:12)", "DataLoader.__next__ (loader.py:30)",
                                        "train_step (train.py:58)"};

}  // namespace

TEST_CASE("stack groups: identical stacks share an entry; rank ranges; the odd one out", "[stack_groups]") {
  std::vector<RankStack> stacks;
  for (int r = 0; r < 16; ++r) stacks.push_back(python_rank(r, r == 7 ? kRead : kAllReduce));
  const auto g = group_stacks(stacks, 3);
  REQUIRE(g.attempt == 3);
  REQUIRE(g.groups.size() == 2);
  REQUIRE(g.rank_count() == 16);
  REQUIRE(g.groups[0].line() == "ranks 0-6, 8-15: all_reduce \xe2\x86\x90 train_step \xe2\x86\x90 main");
  REQUIRE(g.groups[0].rank_count == 15);
  REQUIRE_FALSE(g.groups[0].odd_one_out);
  REQUIRE(g.groups[1].line() == "rank 7 (the odd one out): read \xe2\x86\x90 DataLoader.__next__ \xe2\x86\x90 train_step");
  REQUIRE(g.odd_one_out() == &g.groups[1]);
  REQUIRE(g.groups[1].python);
  REQUIRE(g.groups[1].threads == std::vector<std::vector<std::string>>{kRead});  // the main thread, whole
  REQUIRE(g.groups[0].signature.size() == 16);
  REQUIRE(g.groups[0].signature != g.groups[1].signature);
}

TEST_CASE("stack groups: one group has no odd one; a tie for the fewest names none", "[stack_groups]") {
  std::vector<RankStack> same;
  for (int r = 0; r < 4; ++r) same.push_back(python_rank(r, kAllReduce));
  const auto one = group_stacks(same, 0);
  REQUIRE(one.groups.size() == 1);
  REQUIRE(one.odd_one_out() == nullptr);
  REQUIRE(one.lines() == std::vector<std::string>{"ranks 0-3: all_reduce \xe2\x86\x90 train_step \xe2\x86\x90 main"});

  // 6 in one place, 1 in each of two others: two ranks in two places are not one odd rank.
  std::vector<RankStack> tie;
  for (int r = 0; r < 8; ++r) {
    tie.push_back(python_rank(r, r == 2 ? kRead : r == 5 ? std::vector<std::string>{"sleep (x.py:1)"} : kAllReduce));
  }
  const auto t = group_stacks(tie, 0);
  REQUIRE(t.groups.size() == 3);
  REQUIRE(t.odd_one_out() == nullptr);
  REQUIRE(t.groups[0].ranks_text() == "ranks 0-1, 3-4, 6-7");
  REQUIRE(t.groups[1].ranks_text() == "rank 2");  // equal counts: lowest rank first
  REQUIRE(t.groups[2].ranks_text() == "rank 5");

  // Two equal halves: no odd one either.
  std::vector<RankStack> halves;
  for (int r = 0; r < 8; ++r) halves.push_back(python_rank(r, r < 4 ? kRead : kAllReduce));
  REQUIRE(group_stacks(halves, 0).odd_one_out() == nullptr);
}

TEST_CASE("stack groups: failed captures form entries by error text, never the odd one", "[stack_groups]") {
  std::vector<RankStack> stacks;
  for (int r = 0; r < 6; ++r) stacks.push_back(python_rank(r, kAllReduce));
  stacks.push_back(python_rank(6, kRead));
  auto timed_out = python_rank(7, kRead);  // what was had does not count: the error does
  timed_out.error = "timed out after 5 s";
  stacks.push_back(timed_out);
  RankStack denied;
  denied.rank = 8;
  denied.error = "ptrace: Operation not permitted";
  stacks.push_back(denied);
  RankStack nothing;  // no stack and no error
  nothing.rank = 9;
  stacks.push_back(nothing);
  auto timed_out_too = native_rank(10, {});
  timed_out_too.error = "timed out after 5 s";
  stacks.push_back(timed_out_too);

  const auto g = group_stacks(stacks, 0);
  REQUIRE(g.groups.size() == 5);
  REQUIRE(g.groups[0].ranks_text() == "ranks 0-5");
  REQUIRE(g.groups[1].line() == "rank 6 (the odd one out): read \xe2\x86\x90 DataLoader.__next__ \xe2\x86\x90 train_step");
  REQUIRE(g.groups[2].line() == "ranks 7, 10: no stack: timed out after 5 s");
  REQUIRE(g.groups[2].threads.empty());
  REQUIRE(g.groups[3].line() == "rank 8: no stack: ptrace: Operation not permitted");
  REQUIRE(g.groups[4].line() == "rank 9: no stack: no stack captured");
  for (std::size_t i = 2; i < 5; ++i) REQUIRE_FALSE(g.groups[i].odd_one_out);

  // Only errors and one stack: no odd one.
  REQUIRE(group_stacks({python_rank(0, kAllReduce), denied}, 0).odd_one_out() == nullptr);
}

TEST_CASE("stack groups: native ranks compare the set of their threads; addresses do not count", "[stack_groups]") {
  const std::vector<std::string> main_thread = {"__futex_abstimed_wait_common", "0x7f3a11 ??",
                                                "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
                                                "crun::runtime::Work::wait() (work.cc:20)",
                                                "crun::runtime::all_reduce(float*, unsigned long) (collectives.cc:88)",
                                                "train_step (train.cc:30)", "main (train.cc:70)", "__libc_start_main"};
  const std::vector<std::string> op_queue = {"epoll_wait", "crun::runtime::OpQueue::run()", "start_thread"};
  auto a = native_rank(0, {main_thread, op_queue});
  auto b = native_rank(1, {op_queue, main_thread});  // the same threads, listed in another order
  auto c = native_rank(2, {main_thread, op_queue});
  c.threads[0][1] = "0x7f9900 ??";  // another address of the same unknown frame
  auto d = native_rank(3, {{"nanosleep", "stuck_in_native (hang.cc:9)", "main (hang.cc:20)"}, op_queue});
  const auto g = group_stacks({a, b, c, d}, 1);
  REQUIRE(g.groups.size() == 2);
  REQUIRE(g.groups[0].ranks_text() == "ranks 0-2");
  REQUIRE(g.groups[0].summary == "crun::runtime::Work::wait \xe2\x86\x90 crun::runtime::all_reduce \xe2\x86\x90 train_step");
  REQUIRE_FALSE(g.groups[0].python);
  REQUIRE(g.groups[0].threads.size() == 2);
  REQUIRE(g.groups[0].threads[0][1] == "??");
  REQUIRE(g.groups[1].line() == "rank 3 (the odd one out): nanosleep \xe2\x86\x90 stuck_in_native \xe2\x86\x90 main");

  // A native rank and a Python rank never share an entry, nor do different thread sets.
  auto e = native_rank(4, {main_thread});
  REQUIRE(group_stacks({a, e}, 0).groups.size() == 2);
  // Only runtime frames: the innermost one stands for the summary.
  REQUIRE(group_stacks({native_rank(0, {{"__poll", "_start"}})}, 0).groups[0].summary == "__poll");
  // Frames as agent/stack_text.h writes them: the C runtime's marked, unknown ones with their module.
  const auto marked = group_stacks({native_rank(0, {{"pause (pause.c:29) [libc.so.6]", "?? (libfoo.so)",
                                                      "stuck_in_native (hang.cc:9)", "main (hang.cc:20)", "__libc_start_call_main [libc.so.6]"}})}, 0);
  REQUIRE(marked.groups[0].summary == "stuck_in_native \xe2\x86\x90 main");
}

TEST_CASE("stack groups: bounds on frames, threads, text, ranges and groups", "[stack_groups]") {
  SECTION("frames, threads and text") {
    std::vector<std::vector<std::string>> threads;
    for (int t = 0; t < 20; ++t) {
      std::vector<std::string> frames;
      for (int f = 0; f < 100; ++f) frames.push_back("f" + std::to_string(t) + "_" + std::to_string(f) + std::string(300, 'x'));
      threads.push_back(frames);
    }
    threads[0][0] = std::string("bad\x01\xff\n") + "\xe2\x86";  // control characters, bytes that are not UTF-8
    const auto g = group_stacks({native_rank(0, threads)}, 0);
    REQUIRE(g.groups.size() == 1);
    const auto& e = g.groups[0];
    REQUIRE(e.threads.size() + static_cast<std::size_t>(e.threads_left_out) == 20);
    REQUIRE(e.threads.size() <= kMaxThreadsShown);
    for (const auto& t : e.threads) {
      REQUIRE(t.size() <= kMaxFramesShown);
      for (const auto& f : t) REQUIRE(f.size() <= kMaxTextBytes);
    }
    REQUIRE(e.threads[0][0] == "bad?????");  // 3 then 2 bytes of a cut character
    REQUIRE(e.summary.size() <= kMaxTextBytes);
    REQUIRE(g.to_json().size() <= kMaxJsonBytes);
    REQUIRE(StackGroups::from_json(g.to_json()) == g);
  }
  SECTION("ranges: listed up to the bound, the rest counted") {
    std::vector<RankStack> stacks;
    for (int r = 0; r < 200; ++r) stacks.push_back(python_rank(r, r % 2 == 0 ? kAllReduce : kRead));
    stacks.push_back(python_rank(1001, {"alone (a.py:1)"}));
    const auto g = group_stacks(stacks, 0);
    REQUIRE(g.groups[0].ranks.size() == kMaxRangesPerGroup);
    REQUIRE(g.groups[0].rank_count == 100);
    REQUIRE(g.groups[0].ranks_text().ends_with("62 and 68 more"));
    REQUIRE(g.odd_one_out()->ranks_text() == "rank 1001");
    REQUIRE(StackGroups::from_json(g.to_json()) == g);
  }
  SECTION("groups: the largest and the odd one out stay, the rest are counted") {
    std::vector<RankStack> stacks;
    int rank = 0;
    for (int place = 0; place < 30; ++place) {
      for (int i = 0; i < 40 - place; ++i) stacks.push_back(python_rank(rank++, {"place" + std::to_string(place) + " (p.py:1)"}));
    }
    stacks.push_back(python_rank(rank++, {"odd (p.py:2)"}));
    const auto g = group_stacks(stacks, 0);
    REQUIRE(g.groups.size() == kMaxGroups);
    REQUIRE(g.groups_left_out == 30 + 1 - static_cast<int>(kMaxGroups));
    REQUIRE(g.rank_count() == rank);
    REQUIRE(g.groups.back().odd_one_out);
    REQUIRE(g.groups.back().summary == "odd");
    REQUIRE(g.groups[kMaxGroups - 2].summary == "place14");
    REQUIRE(g.lines().back() == "15 more group(s) (" + std::to_string(g.ranks_left_out) + " rank(s)) left out");
  }
  SECTION("the JSON bound: fewer frames shown, never fewer ranks") {
    std::vector<RankStack> stacks;
    for (int r = 0; r < 16; ++r) {
      std::vector<std::vector<std::string>> threads;
      for (int t = 0; t < 8; ++t) {
        std::vector<std::string> frames;
        for (int f = 0; f < 32; ++f) frames.push_back("r" + std::to_string(r) + "t" + std::to_string(t) + std::string(180, 'f'));
        threads.push_back(frames);
      }
      stacks.push_back(native_rank(r * 3, threads));
    }
    const auto g = group_stacks(stacks, 0);
    REQUIRE(g.groups.size() == 16);
    REQUIRE(g.to_json().size() <= kMaxJsonBytes);
    REQUIRE(g.rank_count() == 16);
    REQUIRE(g.groups[0].threads.size() < 8);
    REQUIRE(StackGroups::from_json(g.to_json()) == g);
  }
}

TEST_CASE("stack groups: merge joins the nodes' grouped forms", "[stack_groups]") {
  std::vector<RankStack> node0, node1;
  for (int r = 0; r < 4; ++r) node0.push_back(python_rank(r, kAllReduce));
  for (int r = 4; r < 8; ++r) node1.push_back(python_rank(r, r == 6 ? kRead : kAllReduce));
  const auto a = group_stacks(node0, 2), b = group_stacks(node1, 2);
  REQUIRE(a.odd_one_out() == nullptr);
  REQUIRE(b.odd_one_out() != nullptr);  // on its node, 1 of 4
  const auto m = merge_stack_groups({a, b});
  REQUIRE(m.attempt == 2);
  REQUIRE(m.groups.size() == 2);
  REQUIRE(m.groups[0].ranks_text() == "ranks 0-5, 7");
  REQUIRE(m.groups[1].line() == "rank 6 (the odd one out): read \xe2\x86\x90 DataLoader.__next__ \xe2\x86\x90 train_step");
  // The same as grouping every rank at once, and merging a part twice changes nothing.
  std::vector<RankStack> all = node0;
  all.insert(all.end(), node1.begin(), node1.end());
  REQUIRE(m == group_stacks(all, 2));
  REQUIRE(merge_stack_groups({a, b, b, m}) == m);
  // An older attempt's part does not count.
  const auto old = group_stacks({python_rank(9, {"elsewhere (e.py:1)"})}, 1);
  REQUIRE(merge_stack_groups({old, a, b}) == m);
  REQUIRE(merge_stack_groups({}).empty());
  // Left-out counts add up.
  StackGroups c;
  c.attempt = 2;
  c.groups_left_out = 2;
  c.ranks_left_out = 5;
  const auto mc = merge_stack_groups({m, c});
  REQUIRE(mc.groups_left_out == 2);
  REQUIRE(mc.rank_count() == 13);
}

TEST_CASE("stack groups: JSON round trip; malformed text refused with a reason", "[stack_groups]") {
  std::vector<RankStack> stacks;
  for (int r = 0; r < 5; ++r) stacks.push_back(python_rank(r, r == 3 ? kRead : kAllReduce));
  RankStack denied;
  denied.rank = 5;
  denied.error = "ptrace: Operation not permitted";
  stacks.push_back(denied);
  const auto g = group_stacks(stacks, 4);
  const auto text = g.to_json();
  REQUIRE(StackGroups::from_json(text) == g);
  REQUIRE(text.find("\"line\":\"rank 3 (the odd one out): read") != std::string::npos);

  const auto refused = [](const std::string& t) {
    std::string why;
    const bool ok = StackGroups::from_json(t, &why).has_value();
    INFO(t);
    REQUIRE_FALSE(ok);
    REQUIRE_FALSE(why.empty());
    REQUIRE(why.find('\n') == std::string::npos);
    return why;
  };
  const auto group = [](const std::string& fields) {
    return R"({"attempt":0,"groups":[{"signature":"0123456789abcdef","rank_count":2,"summary":"s","odd_one_out":false,"error":"","python":false,"threads":[],"threads_left_out":0,)" +
           fields + R"(}],"groups_left_out":0,"ranks_left_out":0})";
  };
  REQUIRE(StackGroups::from_json(group(R"("ranks":[[0,1]])")).has_value());
  refused("");
  refused("[]");
  refused("{\"attempt\":0}");
  refused(R"({"attempt":-1,"groups":[],"groups_left_out":0,"ranks_left_out":0})");
  refused(R"({"attempt":1.5,"groups":[],"groups_left_out":0,"ranks_left_out":0})");
  refused(group(R"("ranks":[[1,0]])"));
  refused(group(R"("ranks":[[0,1],[2,3]])"));  // adjacent: not apart
  refused(group(R"("ranks":[[3,4],[0,1]])"));
  refused(group(R"("ranks":[])"));
  refused(group(R"("ranks":[[0,5]])"));  // rank_count 2 < 6 listed
  refused(group(R"("ranks":[[0,16777216]])"));
  REQUIRE(refused(group(R"("ranks":[[0]])")).find("[first, last]") != std::string::npos);
  auto bad_signature = group(R"("ranks":[[0,1]])");
  bad_signature.replace(bad_signature.find("0123456789abcdef"), 16, "0123456789ABCDEF");
  refused(bad_signature);
  auto control = group(R"("ranks":[[0,1]])");
  control.replace(control.find("\"s\""), 3, "\"\\u001b[31m\"");
  refused(control);
  auto long_summary = group(R"("ranks":[[0,1]])");
  long_summary.replace(long_summary.find("\"s\""), 3, "\"" + std::string(kMaxTextBytes + 1, 's') + "\"");
  refused(long_summary);
  // Two groups with one signature; two odd ones; an error group with a stack; too many groups.
  const auto edited = [&](auto change) {
    auto j = nlohmann::json::parse(text);
    change(j);
    return j.dump();
  };
  REQUIRE(StackGroups::from_json(edited([](nlohmann::json&) {})) == g);
  refused(edited([](nlohmann::json& j) { j["groups"][1]["signature"] = j["groups"][0]["signature"]; }));
  refused(edited([](nlohmann::json& j) { j["groups"][0]["odd_one_out"] = true; }));
  refused(edited([](nlohmann::json& j) { j["groups"][2]["threads"] = nlohmann::json::array({nlohmann::json::array({"f"})}); }));
  refused(edited([](nlohmann::json& j) {
    for (int i = 0; i < 20; ++i) j["groups"].push_back(j["groups"][0]);
  }));
  refused(edited([](nlohmann::json& j) { j["groups"][0]["threads"][0] = nlohmann::json::array(); for (int i = 0; i < 40; ++i) j["groups"][0]["threads"][0].push_back("f"); }));
  refused(edited([](nlohmann::json& j) { j["groups"][0].erase("summary"); }));
  refused(edited([](nlohmann::json& j) { j["groups"][0]["python"] = 1; }));
  refused(std::string(4 * kMaxJsonBytes + 1, ' '));
}

TEST_CASE("stack groups: a rank captured twice counts once; a rank beyond the bound is counted, not listed",
          "[stack_groups]") {
  std::vector<RankStack> stacks;
  for (int r = 0; r < 3; ++r) stacks.push_back(python_rank(r, kAllReduce));
  stacks.push_back(python_rank(1, kRead));  // the first capture of rank 1 counts
  stacks.push_back(python_rank(kMaxStackRank + 1, kRead));
  stacks.push_back(python_rank(-1, kRead));
  const auto g = group_stacks(stacks, 0);
  REQUIRE(g.groups.size() == 1);
  REQUIRE(g.groups[0].ranks_text() == "ranks 0-2");
  REQUIRE(g.ranks_left_out == 2);
  REQUIRE(g.rank_count() == 5);
  REQUIRE(g.lines().back() == "2 more rank(s) left out");
}
