#!/usr/bin/env bash
# The test command: installs what the build and tests need, builds, and runs the whole suite
# through CTest. Tests that need root (network namespaces), PyTorch or Slurm set them up
# themselves; none is skipped silently.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CRUN_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# Two tests at a time on two cores; each test carries its own TIMEOUT.
ctest --test-dir "$build" --output-on-failure --no-tests=error -j2 "$@"
