#!/usr/bin/env bash
# Configures and builds crun into build/ (warnings are errors). Shared by demo.sh and test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CRUN_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
