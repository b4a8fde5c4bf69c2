#!/bin/bash
# scripts/sbatch/tasks.sbatch: 2 nodes x 2 Slurm tasks, each one worker through crun --slurm-tasks
# (no agent). Rank 2 fails at step 50: the step ends (--kill-on-bad-exit) and the script requeues
# the job (MAX_REQUEUES=1); the requeued job (SLURM_RESTART_COUNT=1, which the workers see as
# TORCHELASTIC_RESTART_COUNT) resumes from the step-40 checkpoint and ends with the weights of an
# uninterrupted 4-worker run.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

train=(--epochs 4 --train-size 4000 --test-size 500 --hidden 64 --batch-size 32)
ref=$(reference_sha 4 "${train[@]}")

export PROGRAM=$RECORD_WORKER MAX_REQUEUES=1
submit "$TEMPLATES/tasks.sbatch" "${train[@]}" \
  --checkpoint-dir "$WORK/ckpt" --checkpoint-every 20 --fail-at-step 50 --fail-rank 2
# The requeued job waits for its BeginTime (cred_expire + 1 = 6 s on the box) before it starts.
wait_job "$JOB" 120
expect_state COMPLETED
[ "$(job_field Restarts)" = 1 ] || fail "Restarts=$(job_field Restarts), expected 1"

expect_count 1 "^crun-job: job $JOB attempt 0 on n\[1-2\]: 4 tasks"
grep_out 'injected failure at step 50 on rank 2' >/dev/null
expect_count 1 "^crun-job: the step failed \(exit [0-9]+\): requeueing job $JOB"
expect_count 1 "^crun-job: job $JOB attempt 1 on n\[1-2\]: 4 tasks"
grep_out '^resumed from checkpoint at step 40 ' >/dev/null
expect_count 1 '^crun-job: exit 0$'

for attempt in slurm0.crun0 slurm1.crun1; do
  check_ranks $attempt 4 2
  for f in $RECORDS; do
    [ "$(rec "$f" RANK)" = "$(rec "$f" SLURM_PROCID)" ] || fail "$f: RANK is not SLURM_PROCID"
    [ "$(rec "$f" LOCAL_RANK)" = "$(rec "$f" SLURM_LOCALID)" ] || fail "$f: LOCAL_RANK is not SLURM_LOCALID"
    [ "$(rec "$f" GROUP_RANK)" = "$(rec "$f" SLURM_NODEID)" ] || fail "$f: GROUP_RANK is not SLURM_NODEID"
    [ "$(rec "$f" TORCHELASTIC_RESTART_COUNT)" = "${attempt:5:1}" ] || fail "$f: TORCHELASTIC_RESTART_COUNT=$(rec "$f" TORCHELASTIC_RESTART_COUNT)"
    [ "$(rec "$f" SLURM_RESTART_COUNT)" = "$([ "${attempt:5:1}" = 1 ] && echo 1)" ] || fail "$f: SLURM_RESTART_COUNT=$(rec "$f" SLURM_RESTART_COUNT)"
  done
done
sha=$(final_sha)
[ "$sha" = "$ref" ] || fail "weights after the requeue $sha differ from the uninterrupted run's $ref"
log "4 tasks = 4 workers, rank 2 failed, job requeued (SLURM_RESTART_COUNT=1), resumed at 40, weights as uninterrupted"
