# Sanitizer and fuzzing builds (scripts/sanitize.sh and scripts/fuzz.sh configure them).
#
#   CRUN_SANITIZE=address   ASan + UBSan (every UBSan check aborts: -fno-sanitize-recover=all)
#   CRUN_SANITIZE=thread    TSan
#   CRUN_FUZZ=ON            the libFuzzer targets of tests/fuzz (clang, with CRUN_SANITIZE=address):
#                           every object also gets libFuzzer's coverage (-fsanitize=fuzzer-no-link),
#                           so one ASan build serves both the sanitizer tests and the fuzzers
#
# Sanitizer builds are -O1 -g (readable stacks, about as fast to build as -O2) and leave bench/ out
# unless CRUN_BUILD_BENCH is set (its timings mean nothing there).
set(CRUN_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan), thread (TSan) or empty")
set_property(CACHE CRUN_SANITIZE PROPERTY STRINGS "" address thread)
option(CRUN_FUZZ "Build the libFuzzer targets (clang, CRUN_SANITIZE=address)" OFF)

if(CRUN_SANITIZE STREQUAL "address")
  set(crun_sanitizer_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(CRUN_SANITIZE STREQUAL "thread")
  set(crun_sanitizer_flags -fsanitize=thread)
elseif(NOT CRUN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CRUN_SANITIZE must be address, thread or empty, not '${CRUN_SANITIZE}'")
endif()

if(CRUN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CRUN_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "CRUN_FUZZ needs clang and CRUN_SANITIZE=address (scripts/fuzz.sh sets both)")
  endif()
  list(APPEND crun_sanitizer_flags -fsanitize=fuzzer-no-link)
endif()

if(crun_sanitizer_flags)
  add_compile_options(${crun_sanitizer_flags} -fno-omit-frame-pointer)
  add_link_options(${crun_sanitizer_flags})
  string(REPLACE "-O2" "-O1" CMAKE_CXX_FLAGS_RELWITHDEBINFO "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  # Line tables are all a sanitizer report's stack needs (file:line); full -g cost clang ~10 %
  # more time (agent.cc: 26.4 s against 23.9 s with ASan + UBSan).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    string(REGEX REPLACE "(^| )-g( |$)" "\\1-gline-tables-only\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO
           "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  endif()
  # GCC 12 warns (-Wtsan) that TSan does not model std::atomic_thread_fence, which Asio's
  # std_fenced_block uses around handler calls. Asio hands every operation between threads through
  # its scheduler's mutex, which TSan does see, so the fences hide no edge TSan needs; the warning
  # only says so, and -Werror would stop the build. Clang has no such warning.
  if(CRUN_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-tsan)
  endif()
  message(STATUS "crun: sanitizer build: ${crun_sanitizer_flags}")
endif()

if(CRUN_SANITIZE STREQUAL "")
  set(crun_bench_default ON)
else()
  set(crun_bench_default OFF)
endif()
option(CRUN_BUILD_BENCH "Build bench/ (off by default in sanitizer builds)" ${crun_bench_default})
