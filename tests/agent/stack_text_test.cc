// Stack text (agent/stack_text.h): eu-stack's and faulthandler's output, as captured here
// (elfutils 0.188, CPython 3.11), read into frames; the one place a console line names.
#include <catch2/catch.hpp>
#include <string>

#include "agent/stack_text.h"

using namespace crun;

namespace {

// `eu-stack -s -i -m -p PID` of a two-thread C++ program (a thread in sleep, main in pause),
// with a frame of no symbol and one of no module.
const char* kEuStack =
    "PID 570 - process\n"
    "TID 570:\n"
    "#0  0x00007fcf33ef1df2 __libc_pause - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "    ../sysdeps/unix/sysv/linux/pause.c:29:10\n"
    "#1  0x000055a9c08192ad hang_in_named_function() - /tmp/stk/h\n"
    "    /tmp/stk/h.cc:3:73\n"
    "#2  0x000055a9c0819136 main - /tmp/stk/h\n"
    "    /tmp/stk/h.cc:4:76\n"
    "#3  0x00007fcf33e4524a __libc_start_call_main - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "    ../sysdeps/nptl/libc_start_call_main.h:58:16\n"
    "#4  0x000055a9c0819171 _start - /tmp/stk/h\n"
    "TID 571:\n"
    "#0  0x00007fcf33eed545 clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007fcf340d44a3 - /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30\n"
    "#2  0x00007fcf33ea71f5\n"
    "eu-stack: dwfl_thread_getframes tid 571 at 0x7fcf33ea71f5 in <unknown>: No DWARF information found\n";

const char* kFaulthandler =
    "Thread 0x00007fa21e7c36c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 1038 in _bootstrap_inner\n"
    "\n"
    "Current thread 0x00007fa21f606b80 (most recent call first):\n"
    "  File \"/tmp/job/train.py\", line 12 in stuck_here\n"
    "  File \"/tmp/job/train.py\", line 20 in <module>\n";

}  // namespace

TEST_CASE("stack text: eu-stack's threads and frames, names and lines, no addresses where a name is known",
          "[stack_text]") {
  std::string complaint;
  const auto threads = parse_eu_stack(kEuStack, &complaint);
  REQUIRE(threads.size() == 2);
  REQUIRE(threads[0].size() == 5);
  CHECK(threads[0][0] == "__libc_pause (pause.c:29) [libc.so.6]");
  CHECK(threads[0][1] == "hang_in_named_function() (h.cc:3)");
  CHECK(threads[0][2] == "main (h.cc:4)");
  CHECK(threads[0][3] == "__libc_start_call_main (libc_start_call_main.h:58) [libc.so.6]");
  CHECK(threads[0][4] == "_start");
  REQUIRE(threads[1].size() == 3);
  CHECK(threads[1][0] == "clock_nanosleep [libc.so.6]");  // the symbol version left out
  CHECK(threads[1][1] == "?? (libstdc++.so.6.0.30)");
  CHECK(threads[1][2] == "0x00007fcf33ea71f5 ??");
  CHECK(complaint.rfind("eu-stack: dwfl_thread_getframes", 0) == 0);

  RankStack s;
  s.threads = threads;
  CHECK(where_text(s) == "hang_in_named_function() (h.cc:3)");  // past the C runtime's frames
  s.threads = {{"?? (python3.11)", "0x00007fcf33ea71f5 ??", "_PyEval_EvalFrameDefault"}};
  CHECK(where_text(s) == "_PyEval_EvalFrameDefault");  // past the frames without a name
  s.threads = {{"__interceptor_pause", "std::this_thread::sleep_for<long>", "hang_in_named_function() (h.cc:3)", "main"}};
  CHECK(where_text(s) == "hang_in_named_function() (h.cc:3)");  // past a sanitizer's and the library's frames
  s.threads = {{"__libc_pause [libc.so.6]"}};
  CHECK(where_text(s) == "__libc_pause [libc.so.6]");  // nothing else: the innermost
  CHECK(where_text(RankStack{}).empty());
  CHECK(parse_eu_stack("").empty());
  CHECK(parse_eu_stack("#0  0x1 main\n").empty());  // a frame outside any thread
}

TEST_CASE("stack text: faulthandler's threads, innermost first; the main thread's innermost frame is the place",
          "[stack_text]") {
  const auto threads = parse_faulthandler(kFaulthandler);
  REQUIRE(threads.size() == 2);
  CHECK(threads[0] == std::vector<std::string>{"run (threading.py:975)", "_bootstrap_inner (threading.py:1038)"});
  CHECK(threads[1] == std::vector<std::string>{"stuck_here (train.py:12)", "<module> (train.py:20)"});
  RankStack s;
  s.threads = {{"main"}};
  s.python_threads = threads;
  CHECK(where_text(s) == "stuck_here (train.py:12)");
  CHECK(faulthandler_done(kFaulthandler));
  std::string cut = kFaulthandler;
  cut.resize(cut.size() - 30);  // the last line half written
  CHECK_FALSE(faulthandler_done(cut));
  CHECK_FALSE(faulthandler_done(std::string(kFaulthandler).substr(0, 150)));  // the main thread not reached
  CHECK(faulthandler_done("Current thread 0x1 (most recent call first):\n"
                          "  File \"<frozen runpy>\", line 198 in _run_module_as_main\n"));
  CHECK(parse_faulthandler("  File \"x.py\", line 1 in f\n").empty());  // no thread opened
  CHECK(parse_faulthandler("Thread 0x1 (most recent call first):\n  <no Python frame>\n  ...\n") ==
        StackThreads{{}});
}
