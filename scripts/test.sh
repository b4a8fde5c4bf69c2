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
# Two tests at a time on two cores; each test carries its own TIMEOUT.
rc=0
ctest --test-dir "$build" --output-on-failure --no-tests=error -j2 "$@" || rc=$?
if [ "${CRUN_TEST_SANITIZERS:-1}" != 0 ]; then
  "$root/scripts/sanitize.sh" address || rc=1
  "$root/scripts/fuzz.sh" "${CRUN_TEST_FUZZ_SECONDS:-10}" || rc=1
  "$root/scripts/sanitize.sh" thread || rc=1
fi
exit "$rc"
