#!/usr/bin/env bash
# scripts/sanitize.sh address|thread [CTEST ARGS...]
#
# Builds crun under sanitizers and runs the base, store, rendezvous, agent, launcher, runtime,
# multinode and ops tests with them (address also runs every fuzz target once over its seed corpus;
# thread leaves out the tests that train native workers, below):
#   address  ASan + UBSan (+ LeakSanitizer), into build-asan/; the same build holds the libFuzzer
#            targets (scripts/fuzz.sh reuses it)
#   thread   TSan, into build-tsan/
# CRUN_SANITIZE_BUILD_DIR overrides the folder; CRUN_SANITIZE_CXX the compiler (default clang++:
# on this 2-core machine it builds the ASan+UBSan objects about twice as fast as g++, and it is the
# compiler libFuzzer needs anyway; g++ works too, without the fuzz targets).
#
# Any sanitizer report fails the run, from whichever process it comes: the tests, the crun agents
# they start and the workers those start. Every instrumented process writes its reports to
# <build>/sanitizer-reports/<tool>.<pid> (log_path) and stops at the first one (halt_on_error,
# non-zero exitcode); after CTest, a report file there fails the script even when the test that
# caused it passed (a worker's exit code may be what the test expected). One kind is set aside
# (<build>/sanitizer-traced-at-exit/): LeakSanitizer saying only that it cannot run under ptrace, from a
# worker that exited while crun's stack capture (eu-stack) held it. Suppressions, for
# third-party code only, are in scripts/sanitizers/*.supp with a reason each.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind=${1:-}
case "$kind" in
  address) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *) echo "usage: $0 address|thread [ctest args...]" >&2; exit 2 ;;
esac
shift
build="${CRUN_SANITIZE_BUILD_DIR:-$root/$default_dir}"
cxx="${CRUN_SANITIZE_CXX:-clang++}"
supp="$root/scripts/sanitizers"

fuzz=OFF
labels='base|store|rendezvous|agent|launcher|runtime|multinode|ops'
skip_rooms=faults
# The slowed-host pre-flight checks judge crun-precheck's compute time on a CPU shared with six busy
# loops: instrumented, the slowed host's share takes past their bounds (the healthy case,
# multinode.precheck, still runs crun-precheck under ASan).
exclude='^(runtime\.package|multinode\.precheck_slow|etcd\.precheck)$'
if [ "$kind" = address ] && "$cxx" --version | grep -q clang; then
  fuzz=ON
  labels="$labels|fuzz"
fi
if [ "$kind" = thread ]; then
  # TSan looks for races between crun's threads (the agent's loop, the store server, the
  # coordinator, helper threads, the keeper and worker spawns): every room but the native
  # workers' training (runtime, and the multi-host tests that train: TSan slows Gloo's
  # training ~20x past their bounds; ASan runs them), and the pre-flight check's tests (they
  # judge crun-precheck's matmul times, which TSan makes 8-60 s; ASan runs the healthy case).
  labels='base|store|rendezvous|agent|launcher|multinode|ops'
  skip_rooms='faults;runtime'
  exclude='^(multinode\.(train_mlp|hang|precheck|precheck_slow|state_replica_train_mlp)|etcd\.(train_mlp|precheck))$'
fi
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCRUN_SANITIZE="$kind" -DCRUN_FUZZ="$fuzz" -DCRUN_BUILD_BENCH=OFF -DCRUN_SKIP_TEST_ROOMS="$skip_rooms" >/dev/null
cmake --build "$build" -j"$(nproc)"

reports="$build/sanitizer-reports"
traced="$build/sanitizer-traced-at-exit"
rm -rf "$reports" "$traced"
mkdir -p "$reports" "$traced"
# Only flags each tool knows: an unknown one is itself a warning in the report folder.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp"
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$reports/tsan:suppressions=$supp/tsan.supp"

# runtime.package builds an uninstrumented program against the instrumented libcrun_runtime.so: it
# tests the install, not memory, and cannot link there.
rc=0
ctest --test-dir "$build" --output-on-failure --no-tests=error -j2 -L "^($labels)\$" -E "$exclude" "$@" || rc=$?

# LeakSanitizer cannot run in a process that exits while traced: a worker that ends while crun's
# stack capture (eu-stack, ptrace) holds it says only that. Not a finding: set aside, named.
for f in $(find "$reports" -type f | sort); do
  if [ "$(grep -cv -e 'LeakSanitizer has encountered a fatal error' -e 'HINT: For debugging, try setting environment variable LSAN_OPTIONS' \
            -e 'HINT: LeakSanitizer does not work under ptrace' "$f")" -eq 0 ] && grep -q 'does not work under ptrace' "$f"; then
    echo "sanitize.sh: $f: LeakSanitizer could not run (the process exited while traced); not a finding"
    mv "$f" "$traced/"
  fi
done
found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
  echo "sanitize.sh: $(wc -l <<<"$found") sanitizer report(s) under $reports:" >&2
  for f in $found; do
    echo "==== $f" >&2
    head -n 80 "$f" >&2
  done
  rc=1
fi
[ "$rc" -eq 0 ] && echo "sanitize.sh $kind: clean (no sanitizer report, every test passed)"
exit "$rc"
