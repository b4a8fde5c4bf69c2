#!/usr/bin/env bash
# scripts/fuzz.sh SECONDS [TARGET...]
#
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-asan/: the build that
# scripts/sanitize.sh address also uses; CRUN_FUZZ_BUILD_DIR overrides) and runs each target, or
# only the TARGETs named, for SECONDS each, as many at once as there are CPUs (libFuzzer runs one
# thread: `fuzz.sh 30` with eleven targets takes 3 minutes on two cores).
#   - Seeds come from tests/fuzz/<target>/corpus (read, never written); what the fuzzer finds goes
#     to <build>/fuzz/<target>/corpus, which later runs in the same build folder start from.
#   - A crash, sanitizer report, leak, timeout (> 20 s for one input) or OOM (> 2 GiB RSS) stops
#     that target; its reproducer is <build>/fuzz/<target>/crash-* (or leak-, timeout-, oom-),
#     the log's end is printed and the script exits 1 after the remaining targets.
#     Reproduce with: <build>/tests/fuzz/fuzz_<target> <reproducer>
# At the end: one line per target with its executions and result.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=${1:-}
[[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -ge 1 ] || { echo "usage: $0 SECONDS [TARGET...]" >&2; exit 2; }
shift
build="${CRUN_FUZZ_BUILD_DIR:-$root/build-asan}"
cxx="${CRUN_FUZZ_CXX:-clang++}"

cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCRUN_SANITIZE=address -DCRUN_FUZZ=ON -DCRUN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target crun_fuzz -j"$(nproc)"

manifest="$build/fuzz_targets.txt"
[ -s "$manifest" ] || { echo "fuzz.sh: no targets in $manifest" >&2; exit 1; }
for t in "$@"; do
  cut -f1 "$manifest" | grep -qx "$t" || { echo "fuzz.sh: no fuzz target '$t' (see $manifest)" >&2; exit 2; }
done

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# One target: its log and reproducers in <build>/fuzz/<name>/, its result in result (ok or FAILED).
fuzz_target() {
  local name=$1 binary=$2 seeds=$3 dict=$4
  local work="$build/fuzz/$name"
  mkdir -p "$work/corpus"
  rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$work/result"
  # Inputs up to 8 KiB, or the largest seed when that is bigger (longer seeds would be cut).
  local max_len
  max_len=$(find "$seeds" -type f -printf '%s\n' | sort -n | tail -n 1)
  [ "${max_len:-0}" -gt 8192 ] || max_len=8192
  local args=(-max_total_time="$seconds" -max_len="$max_len" -timeout=20 -rss_limit_mb=2048 -use_value_profile=1
              -print_final_stats=1 -artifact_prefix="$work/")
  [ -n "$dict" ] && args+=(-dict="$dict")
  local status=ok
  "$binary" "${args[@]}" "$work/corpus" "$seeds" >"$work/log" 2>&1 || status=FAILED
  if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then status=FAILED; fi
  echo "$status" >"$work/result"
}

names=()
running=0
while IFS=$'\t' read -r name binary seeds dict; do
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  if [ "$running" -ge "$(nproc)" ]; then wait -n || true; running=$((running - 1)); fi
  echo "fuzz.sh: $name for ${seconds}s (log: $build/fuzz/$name/log)"
  fuzz_target "$name" "$binary" "$seeds" "$dict" &
  running=$((running + 1))
  names+=("$name")
done <"$manifest"
wait

rc=0
summary=""
for name in "${names[@]}"; do
  work="$build/fuzz/$name"
  status=$(cat "$work/result" 2>/dev/null || echo FAILED)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
  if [ "$status" != ok ]; then
    rc=1
    tail -n 60 "$work/log" >&2
    echo "fuzz.sh: $name FAILED; reproducer(s): $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | tr '\n' ' ')" >&2
  fi
  summary+=$(printf '%-20s %12s execs  %s' "$name" "${execs:-?}" "$status")$'\n'
done
echo "fuzz.sh: ${seconds}s per target, $(nproc) at a time"
printf '%s' "$summary"
exit "$rc"
