#!/bin/bash
# scripts/sbatch/single-node-gpus.sbatch on one node with two (box) GPUs: crun --standalone starts
# one worker per GPU Slurm assigned; rank 1 fails at step 50, crun restarts both workers, they
# resume from the step-40 checkpoint and end with the weights of an uninterrupted run.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

train=(--epochs 4 --train-size 4000 --test-size 500 --hidden 64 --batch-size 32)
ref=$(reference_sha 2 "${train[@]}")

export PROGRAM=$RECORD_WORKER MAX_RESTARTS=1
submit --gpus-per-node=2 "$TEMPLATES/single-node-gpus.sbatch" "${train[@]}" \
  --checkpoint-dir "$WORK/ckpt" --checkpoint-every 20 --fail-at-step 50 --fail-rank 1
wait_job "$JOB" 90
expect_state COMPLETED

grep_out "^crun-job: job $JOB on n1: 2 workers of " >/dev/null
grep_out 'injected failure at step 50 on rank 1' >/dev/null
grep_out 'root cause.*rank 1 .*exit code 13' >/dev/null
grep_out '^resumed from checkpoint at step 40 ' >/dev/null
check_ranks slurm0.crun0 2 2
check_ranks slurm0.crun1 2 2
for f in $RECORDS; do
  [ "$(rec "$f" SLURM_GPUS_ON_NODE)" = 2 ] || fail "$f: SLURM_GPUS_ON_NODE=$(rec "$f" SLURM_GPUS_ON_NODE)"
done
sha=$(final_sha)
[ "$sha" = "$ref" ] || fail "weights after the restart $sha differ from the uninterrupted run's $ref"
log "2 workers (SLURM_GPUS_ON_NODE), failure at step 50, restart, resume at 40, weights as uninterrupted"
