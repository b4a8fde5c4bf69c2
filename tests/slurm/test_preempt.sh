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
# train_mlp, on SIGUSR1, stops every rank at one agreed step, checkpoints there, prints "preempted:
# checkpoint at step N" and exits 0; the job must resume at N. The notice is sent once rank 0 has
# printed its first epoch line and reaches the workers about 0.1 s later; 150 short epochs (about
# 3 s on this box when idle) leave it time to arrive before the run ends.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
target=${1:?usage: test_preempt.sh batch|step}
TEST_NAME="$TEST_NAME.$target"
setup

train=(--epochs 150 --train-size 4000 --test-size 500 --hidden 64 --batch-size 32)
steps_per_epoch=62 # 4000 samples / 2 ranks / 32 per batch
ref=$(reference_sha 2 "${train[@]}")

export PROGRAM=$RECORD_WORKER NPROC=1 STOP_TIMEOUT=10
submit "$TEMPLATES/preemptible.sbatch" "${train[@]}" --checkpoint-dir "$WORK/ckpt" --checkpoint-every 0
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
grep -q '^crun: received SIGUSR1' "$OUT" ||
  fail "the notice reached no crun before the training ended (train_mlp got faster? give it more epochs)"
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
# train_mlp stops every rank at one agreed step on the notice, checkpoints there and exits 0: no
# worker failure, and the requeued job resumes at exactly that step.
expect_count 1 '^preempted: checkpoint at step [0-9]+$'
at=$(sed -n 's/^preempted: checkpoint at step \([0-9]*\)$/\1/p' "$OUT")
expect_count 0 'worker failed'
expect_count 1 "^resumed from checkpoint at step $at "
[ "$at" -ge $steps_per_epoch ] || fail "preempted at step $at, before the first epoch's end"
# No restart within attempt 0 (a notice is not a failure); attempt 1 sees SLURM_RESTART_COUNT=1.
check_ranks slurm0.crun0 2 1
check_ranks slurm1.crun0 2 1
for f in $RECORDS; do
  [ "$(rec "$f" SLURM_RESTART_COUNT)" = 1 ] || fail "$f: SLURM_RESTART_COUNT=$(rec "$f" SLURM_RESTART_COUNT), expected 1"
done
ls "$RECORD_DIR" | grep -q '^slurm0\.crun[1-9]' && fail "crun restarted workers after the notice: $(ls "$RECORD_DIR")"
sha=$(final_sha)
[ "$sha" = "$ref" ] || fail "weights after preemption and requeue $sha differ from the uninterrupted run's $ref"
log "USR1 -> checkpoint at step $at, crun 138 -> requeue -> resume at $at (SLURM_RESTART_COUNT=1), weights as uninterrupted"
