#!/bin/sh
# Agent benchmark: crun vs torchrun side by side (see run.py). Not part of CTest.
# Usage: bench/agent/run.sh [--runs N] [--variant LABEL=CRUN[,KEY=VALUE...] ...]
#        (BUILD=build dir, default build; with --variant, crun builds/settings side by side)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
cmake --build "$build" --target crun crun_bench_worker >/dev/null
exec /usr/bin/python3 "$root/bench/agent/run.py" --crun "$build/launcher/crun" \
  --worker "$build/bench/agent/crun_bench_worker" "$@"
