#!/usr/bin/env bash
# Configures and builds crun into build/ (warnings are errors). Shared by demo.sh and test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CRUN_BUILD_DIR:-$root/build}"
# -g1: line tables and function names (perf, backtraces, addr2line), no variables: GCC builds the
# tree in 442 s instead of 565 s with -g on two cores (docs/benchmarks.md, "CI time").
cmake -S "$root" -B "$build" -DCRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build "$build" -j"$(nproc)"
