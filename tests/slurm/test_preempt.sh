#!/bin/bash
# scripts/sbatch/preemptible.sbatch on two nodes, right after the first checkpoint a preemption
# notice, either
#   batch: to the batch shell, as --signal=B:USR1@60 sends it (scancel --batch --signal=USR1):
#          batch shell -> srun -> crun -> workers;
#   step:  to the step's tasks, as srun --signal=USR1@60 sends it (scancel --signal=USR1):
#          crun -> workers, the batch shell sees only srun's exit status.
# crun restarts nothing and exits 138, the script requeues the job, and the requeued job
# (SLURM_RESTART_COUNT=1) resumes from the checkpoint and ends with the weights of an uninterrupted
# run.
#
# train_mlp checkpoints at every epoch's end here; 60 short epochs (about 5 s under Slurm on this
# box) leave the notice, which takes about a second to reach the workers, time to arrive. A
# train_mlp that handles SIGUSR1 itself prints "preempted: checkpoint at step N" and the job must
# resume at N; one that does not dies of the signal, and the job resumes from the last epoch's
# checkpoint.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
target=${1:?usage: test_preempt.sh batch|step}
TEST_NAME="$TEST_NAME.$target"
setup

train=(--epochs 60 --train-size 4000 --test-size 500 --hidden 64 --batch-size 32)
steps_per_epoch=62 # 4000 samples / 2 ranks / 32 per batch
ref=$(reference_sha 2 "${train[@]}")

export PROGRAM=$RECORD_WORKER NPROC=1 STOP_TIMEOUT=10
submit "$TEMPLATES/preemptible.sbatch" "${train[@]}" --checkpoint-dir "$WORK/ckpt" --checkpoint-every 0
# Rank 0 prints "epoch 0: ..." once the epoch's checkpoint is on disk.
wait_output "$OUT" '^epoch 0: ' 60
case $target in
  batch) scancel --batch --signal=USR1 "$JOB" || fail "scancel --batch --signal=USR1 $JOB failed" ;;
  step) scancel --signal=USR1 "$JOB" || fail "scancel --signal=USR1 $JOB failed" ;;
  *) fail "unknown target '$target' (batch or step)" ;;
esac
log "sent USR1 to the $target of job $JOB"
# Then: crun's workers stop (--stop-timeout 10), requeue, BeginTime (6 s on the box), run again.
wait_job "$JOB" 120
expect_state COMPLETED
[ "$(job_field Restarts)" = 1 ] || fail "Restarts=$(job_field Restarts), expected 1"

expect_count 1 "^crun-job: job $JOB attempt 0 on n\[1-2\]$"
if [ "$target" = batch ]; then
  expect_count 1 '^crun-job: USR1 \(preemption notice\): forwarding it to the workers$'
else
  expect_count 0 '^crun-job: USR1'
fi
expect_count 2 '^crun: received SIGUSR1 \(preemption notice\)' # one line per agent
expect_count 2 '^srun: error: n[12]: task [01]: Exited with exit code 138$' # each agent: 128 + SIGUSR1
expect_count 1 "^crun-job: preempted \(exit 138\): requeueing job $JOB$"
expect_count 1 "^crun-job: job $JOB attempt 1 on n\[1-2\]$"
expect_count 1 '^crun-job: finished$'
resumed=$(sed -n 's/^resumed from checkpoint at step \([0-9]*\) .*/\1/p' "$OUT")
[ -n "$resumed" ] || fail "the requeued job did not resume from a checkpoint"
if grep -q '^preempted: checkpoint at step ' "$OUT"; then
  at=$(sed -n 's/^preempted: checkpoint at step \([0-9]*\).*/\1/p' "$OUT")
  [ "$resumed" = "$at" ] || fail "checkpointed at step $at on the notice, resumed at $resumed"
  log "train_mlp checkpointed at step $at on USR1; resumed there"
else
  [ $((resumed % steps_per_epoch)) -eq 0 ] && [ "$resumed" -ge $steps_per_epoch ] ||
    fail "resumed at step $resumed, not at an epoch's checkpoint (multiples of $steps_per_epoch)"
  log "train_mlp (no USR1 handler) stopped by the notice; resumed at the epoch checkpoint of step $resumed"
fi

# No restart within attempt 0 (a notice is not a failure); attempt 1 sees SLURM_RESTART_COUNT=1.
check_ranks slurm0.crun0 2 1
check_ranks slurm1.crun0 2 1
for f in $RECORDS; do
  [ "$(rec "$f" SLURM_RESTART_COUNT)" = 1 ] || fail "$f: SLURM_RESTART_COUNT=$(rec "$f" SLURM_RESTART_COUNT), expected 1"
done
ls "$RECORD_DIR" | grep -q '^slurm0\.crun[1-9]' && fail "crun restarted workers after the notice: $(ls "$RECORD_DIR")"
sha=$(final_sha)
[ "$sha" = "$ref" ] || fail "weights after preemption and requeue $sha differ from the uninterrupted run's $ref"
log "USR1 -> crun 138 -> requeue -> resume at step $resumed (SLURM_RESTART_COUNT=1), weights as uninterrupted"
