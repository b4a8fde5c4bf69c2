#!/bin/sh
# PyTorch under crun with Debian's torch (/usr/bin/python3):
#  1. torch_smoke.py (gloo all_reduce over env://) under `crun --standalone --nproc-per-node 2`;
#  2. torch_record_fail.py: rank 1 raises under @record; crun exits 1 and names the error-file message.
# Usage: torch_smoke.sh CRUN_BINARY TESTS_DIR
set -eu
crun=$1
dir=$2
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
if ! "$PYTHON_EXEC" -c "import torch.distributed" 2>/dev/null; then
  echo "FAIL: $PYTHON_EXEC cannot import torch.distributed (scripts/install-deps.sh installs python3-torch)"
  exit 1
fi
out=$("$crun" --standalone --nproc-per-node 2 "$dir/torch_smoke.py")
echo "$out"
test "$(echo "$out" | grep -c '^smoke ok rank=[01] world=2 sum=3$')" -eq 2

rc=0
err=$("$crun" --standalone --nproc-per-node 2 "$dir/torch_record_fail.py" 2>&1 >/dev/null) || rc=$?
echo "$err" | grep '^crun:'
test "$rc" -eq 1
echo "$err" | grep -q 'root cause): rank 1 (local rank 1'
echo "$err" | grep -q 'error file: RuntimeError: boom from rank 1'
