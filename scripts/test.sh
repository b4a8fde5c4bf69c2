#!/usr/bin/env bash
# The test command: installs what the build and tests need, builds, and runs the whole suite
# through CTest. Tests that need root (network namespaces), PyTorch or Slurm set them up
# themselves; none is skipped silently.
# Then, unless CRUN_TEST_SANITIZERS=0: the ASan+UBSan pass (scripts/sanitize.sh address, its own
# build in build-asan/), a brief fuzzing pass over the same build (scripts/fuzz.sh, 10 s per
# target) and the TSan pass (scripts/sanitize.sh thread, build-tsan/). They run after the suite,
# as steps of their own rather than CTest tests: they build the project again with another
# compiler, which no CTest timeout or -j2 slot fits. Any failure of the four makes this script
# exit non-zero; all four run regardless.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CRUN_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# Three tests at a time on two cores: most of them wait on timers, processes and sockets (at two
# at a time the suite kept 1.24 of the 2 cores busy); docs/benchmarks.md, "CI time". Each test
# carries its own TIMEOUT.
rc=0
steps=()
failed_dirs=()
step() { # NAME BUILD_DIR|- COMMAND...: runs a step, records its result for the recap
  local name=$1 dir=$2 status=passed
  shift 2
  "$@" || { status=FAILED; rc=1; [ "$dir" = - ] || failed_dirs+=("$dir"); }
  steps+=("$name: $status")
}
step "suite" "$build" ctest --test-dir "$build" --output-on-failure --no-tests=error -j3 "$@"
if [ "${CRUN_TEST_SANITIZERS:-1}" != 0 ]; then
  step "ASan+UBSan pass" "${CRUN_SANITIZE_BUILD_DIR:-$root/build-asan}" "$root/scripts/sanitize.sh" address
  step "fuzzing" - "$root/scripts/fuzz.sh" "${CRUN_TEST_FUZZ_SECONDS:-10}"
  step "TSan pass" "${CRUN_SANITIZE_BUILD_DIR:-$root/build-tsan}" "$root/scripts/sanitize.sh" thread
fi

# The recap, last, where a reader of only the output's tail (a CI page) sees it: each step's result,
# and the end of each failed test's output from CTest's log.
recap_failures() { # BUILD_DIR
  local log="$1/Testing/Temporary/LastTest.log" failed="$1/Testing/Temporary/LastTestsFailed.log"
  [ -s "$failed" ] && [ -f "$log" ] &&
  while IFS=: read -r _ name; do
    echo "---- $name failed in $1; the end of its output:"
    awk -v t="$name" '$0 == "" {next} index($0, "/") && $0 ~ / Test: / && substr($0, index($0, "Test: ") + 6) == t {p = 1}
                      p && /^<end of output>/ {exit} p' "$log" | tail -n 40
  done <"$failed"
  local report
  report=$(find "$1/sanitizer-reports" -type f 2>/dev/null | sort | head -n 1)
  if [ -n "$report" ]; then
    echo "---- sanitizer report(s) in $1/sanitizer-reports; the first, $report:"
    head -n 30 "$report"
  fi
}
echo "==== test.sh recap"
printf '%s\n' "${steps[@]}"
for dir in "${failed_dirs[@]}"; do recap_failures "$dir"; done
exit "$rc"
