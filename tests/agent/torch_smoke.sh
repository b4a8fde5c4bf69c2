#!/bin/sh
# Runs tests/agent/torch_smoke.py under `crun --standalone --nproc-per-node 2` with Debian's torch.
# Usage: torch_smoke.sh CRUN_BINARY SCRIPT
set -eu
crun=$1
script=$2
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
if ! "$PYTHON_EXEC" -c "import torch.distributed" 2>/dev/null; then
  echo "SKIP: $PYTHON_EXEC has no torch"
  exit 77
fi
out=$("$crun" --standalone --nproc-per-node 2 "$script")
echo "$out"
test "$(echo "$out" | grep -c '^smoke ok rank=[01] world=2 sum=3$')" -eq 2
