#!/usr/bin/env bash
# The checks that need a GPU, as one bounded run (the suite's machines have none):
#   scripts/gpu-check.sh BUILD_DIR [PYTHON]
# BUILD_DIR holds a CUDA build's crun, tests/runtime/nccl_test and examples/train_mlp/train_mlp.
# 1. nccl_test: worker_runtime's NCCL collectives on every visible GPU (up to 4 ranks), then
#    train_mlp --device cuda to >= 0.95 accuracy;
# 2. train_mlp under `crun --standalone`, --device cpu (gloo) against --device cuda (cuBLAS+NCCL),
#    at the defaults and at a larger model, 5 runs each, the throughput lines side by side;
# 3. a PyTorch worker (tests/pytorch/nccl_smoke.py) with the nccl backend under crun, and three
#    of the PyTorch parity cases (tests/pytorch/run_case.py) against PYTHON's own torchrun;
# 4. `crun --standalone --precheck` on one GPU: crun-precheck's compute part as cuBLAS's SGEMM on
#    the device (its line says so), its all_reduce through NCCL, then the program starts.
# Prints "gpu-check: N failed" last; exit status 1 when anything failed.
set -u
build=${1:?usage: gpu-check.sh BUILD_DIR [PYTHON]}
python=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
crun=$build/launcher/crun
mlp=$build/examples/train_mlp/train_mlp
failed=0
step() { echo; echo "== $*"; }
log=$(mktemp); trap 'rm -f "$log"' EXIT
run() { # run BOUND_S CMD...: bounded, its status counted, its output in $log
  timeout -k 5 "$1" "${@:2}" >"$log" 2>&1; local rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "gpu-check: FAILED (rc $rc): ${*:2}"; failed=$((failed + 1)); }
}

step "devices"; nvidia-smi -L || failed=$((failed + 1))
step "nccl_test"; run 240 "$build/tests/runtime/nccl_test" --train-mlp "$mlp"; cat "$log"
for size in "default" "large"; do
  extra=(); [ "$size" = large ] && extra=(--hidden 1024 --batch-size 512 --train-size 100000 --epochs 3)
  for dev in cpu cuda; do
    step "train_mlp $size --device $dev, 1 rank, 5 runs"
    for _ in 1 2 3 4 5; do
      run 300 "$crun" --standalone --nproc-per-node 1 "$mlp" --device "$dev" "${extra[@]}"
      grep -E "^(throughput|final):" "$log"
    done
  done
  step "train_mlp $size --device cpu, 2 ranks (gloo), 1 run"
  run 300 "$crun" --standalone --nproc-per-node 2 "$mlp" --device cpu "${extra[@]}"
  grep -E "^(throughput|final):" "$log"
done
step "PyTorch nccl worker under crun"; run 180 "$crun" --standalone --nproc-per-node 1 "$python" "$root/tests/pytorch/nccl_smoke.py"
grep RESULT "$log"
# The parity cases that hold against torch 2.x's torchrun too (env differs from 2.2 on, by the
# differences docs/benchmarks.md "On a GPU" lists; resume and file_timer fail under 2.11's own).
for case in ddp tcpstore record_fail; do
  step "PyTorch parity, case $case, crun against $("$python" -c 'import torch; print("torch", torch.__version__)')'s torchrun"
  PYTHON_EXEC=$python run 300 "$python" "$root/tests/pytorch/run_case.py" --crun "$crun" --case "$case"; tail -3 "$log"
done
step "--precheck on one GPU: the compute part on the device"
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} run 120 "$crun" --standalone --nproc-per-node 1 --precheck /bin/echo precheck-then-program
cat "$log"
grep -q "compute part on CUDA device 0 (cuBLAS SGEMM)" "$log" && grep -q "precheck: node rank 0 " "$log" &&
  grep -q "precheck-then-program" "$log" || { echo "gpu-check: FAILED: the precheck did not run on the GPU"; failed=$((failed + 1)); }
echo; echo "gpu-check: $failed failed"
[ $failed -eq 0 ]
