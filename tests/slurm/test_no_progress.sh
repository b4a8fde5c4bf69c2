#!/bin/bash
# scripts/sbatch/preemptible.sbatch on two nodes with heartbeats on, for a program that fails at
# the same step in every attempt: after --max-no-progress-restarts restarts in a row that did not
# raise the highest step, the coordinator closes the job with exit 8 on every node, and the
# template does not requeue the job (a requeue could only fail the same way).
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

export PROGRAM=/usr/bin/python3 NPROC=1 MAX_RESTARTS=10 STOP_TIMEOUT=5
export CRUN_ARGS="--heartbeat-timeout 30 --max-no-progress-restarts 2"
submit "$TEMPLATES/preemptible.sbatch" "${BASH_SOURCE[0]%/*}/stall_worker.py"
wait_job "$JOB" 120
expect_state FAILED
[ "$(job_field Restarts)" = 0 ] || fail "Restarts=$(job_field Restarts): the template requeued a job without progress"
# Attempt 0 reached step 5 (progress); restarts 1 and 2 did not get past it: closed after restart 2.
grep_out '^stalled rank=[01] restart=2$' >/dev/null
expect_count 0 '^stalled rank=[01] restart=3$'
expect_count 2 '^srun: error: n[12]: task [01]: Exited with exit code 8$'
grep_out '2 restarts in a row made no progress \(highest step 5\)' >/dev/null
expect_count 1 "^crun-job: no progress across restarts \(exit 8\): not requeueing job $JOB$"
expect_count 0 '^crun-job: preempted'
log "restarts without progress -> crun 8 on both nodes -> not requeued"
