#!/bin/bash
# scripts/sbatch/multi-node.sbatch on two nodes with two (box) GPUs each: one crun agent per node
# (srun), which rendezvous at n1's NodeAddr and start two workers each (SLURM_GPUS_ON_NODE). Rank 3,
# on the second node, fails at step 50: both nodes restart, resume from the step-40 checkpoint and
# end with the weights of an uninterrupted 4-worker run.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

train=(--epochs 4 --train-size 4000 --test-size 500 --hidden 64 --batch-size 32)
ref=$(reference_sha 4 "${train[@]}")

export PROGRAM=$RECORD_WORKER MAX_RESTARTS=1
submit --gpus-per-node=2 "$TEMPLATES/multi-node.sbatch" "${train[@]}" \
  --checkpoint-dir "$WORK/ckpt" --checkpoint-every 20 --fail-at-step 50 --fail-rank 3
wait_job "$JOB" 90
expect_state COMPLETED

grep_out "^crun-job: job $JOB on n\[1-2\]: one agent per node" >/dev/null
grep_out 'injected failure at step 50 on rank 3' >/dev/null
grep_out '^resumed from checkpoint at step 40 ' >/dev/null
check_ranks slurm0.crun0 4 2
check_ranks slurm0.crun1 4 2
# The rank that failed ran on n2, and the rank-0 node (n1) names it as the root cause.
for f in $RECORDS; do
  [ "$(rec "$f" RANK)" = 3 ] && { [ "$(rec "$f" SLURMD_NODENAME)" = n2 ] || fail "rank 3 ran on $(rec "$f" SLURMD_NODENAME), expected n2"; }
done
grep_out 'root cause.*rank 3' >/dev/null
sha=$(final_sha)
[ "$sha" = "$ref" ] || fail "weights after the cross-node restart $sha differ from the uninterrupted run's $ref"
log "2 nodes x 2 workers, rank 3 (n2) failed at step 50, both nodes restarted, weights as uninterrupted"
