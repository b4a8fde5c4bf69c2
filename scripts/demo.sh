#!/usr/bin/env bash
# The main demo: installs what crun needs, builds it, and trains a real data-parallel model with
# two workers under `crun --standalone`. Rank 1 is made to fail at step 120 of the first attempt,
# so you see crun's failure report, the restart of the whole group, and training resuming from
# the last checkpoint to the same final weights an uninterrupted run reaches.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CRUN_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"

ckpt="$(mktemp -d)"
trap 'rm -rf "$ckpt"' EXIT
cmd=("$build/launcher/crun" --standalone --nproc-per-node 2 --max-restarts 1
     "$build/examples/train_mlp/train_mlp" --checkpoint-dir "$ckpt" --fail-at-step 120 --fail-rank 1)
printf '\n$ %s\n\n' "${cmd[*]}"
"${cmd[@]}"
