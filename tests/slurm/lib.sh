# Shared by the Slurm tests (sourced): prerequisites, submitting the sbatch templates to the box
# that the slurm.box fixture started, waiting for jobs and for output, and checks.
#
# CTest sets: CRUN, TRAIN_MLP (built binaries), CRUN_SLURM_BOX (the box directory), SOURCE_DIR (the
# repository), WORK (this test's scratch directory, emptied here).
set -euo pipefail

TEST_NAME=${0##*/}
TEST_NAME=${TEST_NAME%.sh}
TEMPLATES="$SOURCE_DIR/scripts/sbatch"
RECORD_WORKER="$SOURCE_DIR/tests/slurm/record_worker.sh"
JOBS=()

log() { echo "[$TEST_NAME] $*"; }

# What a failing test leaves behind to read: every job's output and record, the jobs as Slurm
# sees them, the end of the daemons' logs.
diagnose() {
  local f j
  for f in "$WORK"/job-*.out; do
    [ -f "$f" ] || continue
    echo "----- $f"
    cat "$f"
  done
  for j in "${JOBS[@]}"; do
    echo "----- scontrol show job $j"
    scontrol show job "$j" 2>&1 || true
  done
  if [ -d "$WORK/records" ]; then
    echo "----- records"
    ls "$WORK/records"
  fi
  for f in "$CRUN_SLURM_BOX"/slurmctld.log "$CRUN_SLURM_BOX"/slurmd-n1.log "$CRUN_SLURM_BOX"/slurmd-n2.log; do
    [ -f "$f" ] || continue
    echo "----- tail $f"
    tail -n 15 "$f"
  done
}

fail() {
  echo "FAIL [$TEST_NAME]: $*" >&2
  diagnose >&2
  exit 1
}

# Jobs this test submitted and left unfinished are cancelled (by job id) when it exits.
cancel_own_jobs() {
  local j
  for j in "${JOBS[@]}"; do
    case $(job_state "$j") in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | PREEMPTED | BOOT_FAIL | DEADLINE | OUT_OF_MEMORY | gone) ;;
      *) scancel "$j" 2>/dev/null || true ;;
    esac
  done
}

# Every prerequisite is checked; a missing one fails the test with the way to install it (never a
# silent skip).
require_slurm() {
  local missing=() c
  for c in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
    command -v "$c" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL [$TEST_NAME]: Slurm is not installed (missing: ${missing[*]}); run scripts/install-deps.sh" \
      "(it installs slurmctld slurmd slurm-client munge)" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL [$TEST_NAME]: the Slurm tests need root (the box runs munged, slurmctld and slurmd as root)" >&2
    exit 1
  fi
}

# The environment of a test: no Slurm variables from an outer job (sbatch would pass them on), the
# box's configuration, an empty scratch directory.
setup() {
  require_slurm
  local v
  for v in $(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|PET_|TORCHELASTIC_)' || true); do unset "$v"; done
  unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT
  [ -f "$CRUN_SLURM_BOX/slurm.conf" ] ||
    fail "no Slurm box at $CRUN_SLURM_BOX: the fixture test slurm.box_start did not start it (see its output)"
  export SLURM_CONF="$CRUN_SLURM_BOX/slurm.conf"
  local idle
  idle=$(sinfo -h -N -o '%N %t' 2>&1) || fail "the Slurm box does not answer: $idle"
  rm -rf "$WORK"
  mkdir -p "$WORK/records"
  export CRUN TRAIN_MLP
  export RECORD_DIR="$WORK/records"
  trap cancel_own_jobs EXIT
}

# submit [sbatch options] TEMPLATE [program args]: sets JOB (and OUT, its output file). The
# submitting environment (CRUN, PROGRAM, NPROC, ...) travels with the job (sbatch --export=ALL).
submit() {
  local out
  out=$(sbatch --parsable --chdir="$WORK" --output="$WORK/job-%j.out" "$@" 2>&1) || fail "sbatch $*: $out"
  JOB=${out%%;*}
  JOBS+=("$JOB")
  OUT="$WORK/job-$JOB.out"
  log "submitted job $JOB: $*"
}

# The job's state (PENDING, RUNNING, COMPLETING, REQUEUED, COMPLETED, FAILED, ...), or "gone".
job_state() {
  local line
  line=$(scontrol show job -o "$1" 2>/dev/null) || { echo gone; return; }
  sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<<"$line"
}

# wait_job JOB BOUND: waits until the job has ended for good (a requeued job goes on), at most BOUND
# seconds; sets STATE and JOBINFO (scontrol's one-line record).
# Slurm offers no completion event for a batch job except `sbatch --wait`, and that polls on its
# own at growing intervals (2 s, then 8 s, then 32 s: a 1 s job is seen after 10 s), so this polls
# scontrol every 0.2 s instead, with a bound.
wait_job() {
  local job=$1 bound=$2 start=$SECONDS
  while :; do
    STATE=$(job_state "$job")
    case $STATE in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | PREEMPTED | BOOT_FAIL | DEADLINE | OUT_OF_MEMORY) break ;;
      gone) fail "job $job is not known to slurmctld" ;;
    esac
    [ $((SECONDS - start)) -lt "$bound" ] || fail "job $job is still $STATE after ${bound} s"
    sleep 0.2 # the polling interval (no event to wait on, see above)
  done
  JOBINFO=$(scontrol show job -o "$job")
  log "job $job: $STATE after $((SECONDS - start)) s"
}

# wait_output FILE REGEX BOUND: waits until a line of FILE matches REGEX (bash =~), at most BOUND
# seconds. tail -F follows the file through inotify; only while the file does not exist yet (the
# job has not started) does it look for it at its --sleep-interval, 0.05 s here instead of 1 s.
wait_output() {
  local file=$1 pattern=$2 bound=$3 line left found=1 start=$SECONDS
  coproc FOLLOW { exec tail -F -s 0.05 -n +1 "$file" 2>/dev/null; }
  local follow_pid=$FOLLOW_PID follow_fd=${FOLLOW[0]}
  while :; do
    left=$((bound - (SECONDS - start)))
    [ "$left" -gt 0 ] || break
    IFS= read -r -t "$left" line <&"$follow_fd" || break
    if [[ $line =~ $pattern ]]; then
      found=0
      break
    fi
  done
  kill "$follow_pid" 2>/dev/null || true
  wait "$follow_pid" 2>/dev/null || true
  [ "$found" -eq 0 ] || fail "no line matching '$pattern' in $file within ${bound} s"
}

# A field of scontrol's record of the job (JOBINFO): job_field Restarts -> 1.
job_field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$JOBINFO"; }

expect_state() {
  [ "$STATE" = "$1" ] || fail "job $JOB ended $STATE, expected $1 (ExitCode=$(job_field ExitCode))"
}

# grep_out REGEX [FILE]: the lines of the job's output that match (fails when none does).
grep_out() {
  local file=${2:-$OUT}
  grep -E -- "$1" "$file" || fail "no line matching '$1' in $file"
}

expect_count() { # expect_count N REGEX [FILE]
  local n
  n=$(grep -cE -- "$2" "${3:-$OUT}" || true)
  [ "$n" -eq "$1" ] || fail "$n lines match '$2' in ${3:-$OUT}, expected $1"
}

# The weights train_mlp's rank 0 ended with (exactly one final line in FILE).
final_sha() {
  local file=${1:-$OUT}
  expect_count 1 '^final: accuracy=' "$file"
  sed -n 's/^final: accuracy=[0-9.]* weights_sha256=\([0-9a-f]*\)$/\1/p' "$file"
}

# reference_sha WORLD ARGS...: the weights of an uninterrupted run of WORLD workers on this
# machine, outside Slurm (crun --standalone), with the same training arguments.
reference_sha() {
  local world=$1 out
  shift
  out=$("$CRUN" --standalone --nproc-per-node "$world" "$TRAIN_MLP" "$@" 2>&1) ||
    fail "the reference run failed: $out"
  sed -n 's/^final: accuracy=[0-9.]* weights_sha256=\([0-9a-f]*\)$/\1/p' <<<"$out"
}

# A recorded worker's variable: rec FILE NAME.
rec() { sed -n "s/^$2=//p" "$1"; }

# check_ranks ATTEMPT WORLD PER_NODE: the workers recorded for ATTEMPT (a record file prefix such as
# "slurm0.crun1") are ranks 0..WORLD-1, once each, PER_NODE on each of the WORLD/PER_NODE nodes, with
# node-contiguous ranks (RANK = GROUP_RANK * PER_NODE + LOCAL_RANK), one GROUP_RANK per node, and
# one MASTER_ADDR:MASTER_PORT and run id for all of them. Sets RECORDS (the files).
check_ranks() {
  local attempt=$1 world=$2 per_node=$3 f r seen="" nodes="" endpoints="" runs=""
  RECORDS=$(ls "$RECORD_DIR"/"$attempt".rank* 2>/dev/null | sort -V || true)
  [ "$(wc -w <<<"$RECORDS")" -eq "$world" ] ||
    fail "attempt $attempt: $(wc -w <<<"$RECORDS") workers recorded, expected $world: $(ls "$RECORD_DIR")"
  for f in $RECORDS; do
    r=$(rec "$f" RANK)
    [ "$(rec "$f" WORLD_SIZE)" = "$world" ] || fail "$f: WORLD_SIZE=$(rec "$f" WORLD_SIZE), expected $world"
    [ "$(rec "$f" LOCAL_WORLD_SIZE)" = "$per_node" ] || fail "$f: LOCAL_WORLD_SIZE=$(rec "$f" LOCAL_WORLD_SIZE), expected $per_node"
    [ "$r" -eq $(($(rec "$f" GROUP_RANK) * per_node + $(rec "$f" LOCAL_RANK))) ] ||
      fail "$f: RANK $r is not GROUP_RANK*$per_node+LOCAL_RANK: $(tr '\n' ' ' <"$f")"
    [ "$(rec "$f" MASTER_ADDR)" = 127.0.0.1 ] || fail "$f: MASTER_ADDR=$(rec "$f" MASTER_ADDR), expected 127.0.0.1 (n1's NodeAddr)"
    seen="$seen $r"
    nodes="$nodes $(rec "$f" SLURMD_NODENAME)=$(rec "$f" GROUP_RANK)"
    endpoints="$endpoints $(rec "$f" MASTER_ADDR):$(rec "$f" MASTER_PORT)"
    runs="$runs $(rec "$f" TORCHELASTIC_RUN_ID)"
  done
  [ "$(tr ' ' '\n' <<<"$seen" | sed '/^$/d' | sort -n | tr '\n' ' ')" = "$(seq -s ' ' 0 $((world - 1))) " ] ||
    fail "attempt $attempt: ranks$seen, expected 0..$((world - 1)) once each"
  # Each node (SLURMD_NODENAME) has one group rank, and each group rank one node.
  local pairs
  pairs=$(tr ' ' '\n' <<<"$nodes" | sed '/^$/d' | sort -u)
  [ "$(wc -l <<<"$pairs")" -eq $((world / per_node)) ] || fail "attempt $attempt: node=group rank pairs: $(echo $pairs)"
  [ "$(cut -d= -f1 <<<"$pairs" | sort -u | wc -l)" -eq $((world / per_node)) ] || fail "attempt $attempt: node=group rank pairs: $(echo $pairs)"
  [ "$(tr ' ' '\n' <<<"$endpoints" | sed '/^$/d' | sort -u | wc -l)" -eq 1 ] || fail "attempt $attempt: several master endpoints:$endpoints"
  [ "$(tr ' ' '\n' <<<"$runs" | sed '/^$/d' | sort -u | wc -l)" -eq 1 ] || fail "attempt $attempt: several run ids:$runs"
  log "attempt $attempt: ranks 0..$((world - 1)), $per_node per node ($(echo $pairs)), master $(echo $endpoints | cut -d' ' -f1)"
}
