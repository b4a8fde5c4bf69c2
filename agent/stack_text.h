// Stack text: what eu-stack and Python's faulthandler print, read into RankStack frames
// (agent/rank_stack.h), and the one place a person is told a rank was in.
//
// Contract
//   - parse_eu_stack(text): `eu-stack -s -i -m -p PID` output (elfutils 0.188's format: "TID n:"
//     opens a thread; "#k  0xADDR NAME - MODULE" a frame; an indented "FILE:LINE[:COL]" line after a
//     frame its source) into threads, innermost first. A frame reads "NAME (FILE:LINE)" (FILE's
//     last path component, no column) or "NAME"; without a name "?? (MODULE)" (MODULE's file name),
//     or "0xADDR ??" when not even the module is known. Frames of the C runtime (libc, libpthread,
//     ld-linux, libgcc_s, libstdc++) end with " [MODULE]", so that where_text can pass over them.
//     Symbol versions ("@GLIBC_2.2.5", "@@GLIBC_2.34") are left out. Lines it does not know
//     (eu-stack's own complaints) are skipped; `complaint`, when given, gets the first of them.
//   - parse_faulthandler(text): faulthandler.dump_traceback(all_threads=True) output ("Thread 0x..
//     (most recent call first):" or "Current thread 0x.. ..." opens a thread; "  File \"F\", line N
//     in FUNC" a frame) into threads in the order listed, each innermost first; a frame reads
//     "FUNC (F:N)" with F's last path component. "  <no Python frame>" and "  ..." add no frame.
//   - faulthandler_done(text): the dump plainly ended: its last line is the outermost frame of
//     the main thread (listed last), "<module>" or runpy's "_run_module_as_main".
//   - own_frame(frame): a native frame of the program itself: named, not the C runtime's (marked),
//     not an implementation's reserved name (a leading '_': __libc_*, a sanitizer's
//     __interceptor_*; std::, __gnu_cxx::). The one rule for where_text and the groups' summaries.
//   - where_text(stack): one place for a console line: the innermost frame of the main thread's
//     Python stack (the last listed) when there is one, else the innermost own_frame of the first
//     native thread (the main thread: eu-stack lists by thread id); without one, its innermost
//     named frame that is not the C runtime's (an interpreter's _PyEval_EvalFrameDefault), else
//     its innermost frame; "" when nothing was captured.
//   - Input of any size and content is fine (a parser of outside text: tests/fuzz/stack_text);
//     the output is bounded by the input.
//
// Threading
//   Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/rank_stack.h"

namespace crun {

using StackThreads = std::vector<std::vector<std::string>>;

StackThreads parse_eu_stack(std::string_view text, std::string* complaint = nullptr);
StackThreads parse_faulthandler(std::string_view text);
bool faulthandler_done(std::string_view text);
bool own_frame(std::string_view frame);
std::string where_text(const RankStack& stack);

}  // namespace crun
