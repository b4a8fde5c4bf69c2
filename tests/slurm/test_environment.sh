#!/bin/bash
# What Slurm 22.05 puts in the environment of a batch script and of srun tasks, and what crun
# derives from it: --print-config under srun on two nodes (one agent each), on one node and in the
# batch script itself; the variables --slurm-tasks gives each task; several agents per node refused.
set -euo pipefail
source "${BASH_SOURCE[0]%/*}/lib.sh"
setup

cat >"$WORK/probe.sbatch" <<'SCRIPT'
#!/bin/bash
cd "$WORK_DIR"
env | grep -E '^SLURM' | sort >env.batch
"$CRUN" --print-config /bin/true >config.batch 2>&1
srun --ntasks=2 --ntasks-per-node=1 --output=env.task.%t bash -c "env | grep -E '^SLURM' | sort"
srun --ntasks=2 --ntasks-per-node=1 --output=config.node.%t "$CRUN" --print-config /bin/true
srun --nodes=1 --ntasks=1 --output=config.one "$CRUN" --print-config /bin/true
srun --output=tasks.%t "$CRUN" --slurm-tasks /usr/bin/env
rc=0
srun --output=several.%t "$CRUN" /bin/true || rc=$?
echo "$rc" >several.rc
SCRIPT
WORK_DIR=$WORK submit --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 "$WORK/probe.sbatch"
wait_job "$JOB" 60
expect_state COMPLETED
cd "$WORK"

has() { grep -q "^$2=" "$1" || fail "$1 has no $2: $(tr '\n' ' ' <"$1")"; }
hasnt() { ! grep -q "^$2=" "$1" || fail "$1 has $2 (only step tasks should)"; }
val() { sed -n "s/^$2=//p" "$1"; }

# The batch script: the job's variables, no step's.
for v in SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_NODEID \
  SLURM_PROCID SLURM_LOCALID SLURM_NTASKS SLURM_TASKS_PER_NODE SLURM_GPUS_ON_NODE SLURMD_NODENAME SLURM_CONF; do
  has env.batch $v
done
for v in SLURM_STEP_ID SLURM_STEP_NODELIST SLURM_STEP_NUM_NODES SLURM_STEP_NUM_TASKS SLURM_RESTART_COUNT; do
  hasnt env.batch $v
done
[ "$(val env.batch SLURM_JOB_NODELIST)" = 'n[1-2]' ] || fail "SLURM_JOB_NODELIST=$(val env.batch SLURM_JOB_NODELIST)"
[ "$(val env.batch SLURM_GPUS_ON_NODE)" = 2 ] || fail "SLURM_GPUS_ON_NODE=$(val env.batch SLURM_GPUS_ON_NODE)"

# srun tasks: the step's variables as well.
for t in 0 1; do
  for v in SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_STEP_NODELIST \
    SLURM_STEP_NUM_NODES SLURM_STEP_NUM_TASKS SLURM_STEP_TASKS_PER_NODE SLURM_GPUS_ON_NODE SLURMD_NODENAME; do
    has env.task.$t $v
  done
  [ "$(val env.task.$t SLURM_NODEID)" = "$t" ] || fail "task $t: SLURM_NODEID=$(val env.task.$t SLURM_NODEID)"
  [ "$(val env.task.$t SLURMD_NODENAME)" = "n$((t + 1))" ] || fail "task $t: SLURMD_NODENAME=$(val env.task.$t SLURMD_NODENAME)"
done
log "batch script: job variables only; srun tasks: the step's too (env.batch, env.task.* in $WORK)"

# One agent per node: a two-node c10d rendezvous at n1's NodeAddr, node rank = SLURM_NODEID. The
# box's node names do not resolve, so crun must ask Slurm for the address (scontrol's NodeAddr).
! getent hosts n1 >/dev/null || fail "n1 resolves on this machine ($(getent hosts n1)): the NodeAddr path is not exercised"

conf() { sed -n "s/^$2 = \(.*\)$/\1/p" "$1"; }
endpoint=""
for t in 0 1; do
  c=config.node.$t
  [ "$(conf $c nnodes)" = "2  (SLURM_STEP_NUM_NODES)" ] || fail "$c: nnodes = $(conf $c nnodes)"
  [ "$(conf $c node_rank)" = "$t  (SLURM_NODEID)" ] || fail "$c: node_rank = $(conf $c node_rank)"
  [[ "$(conf $c rdzv_backend)" == "c10d  "* ]] || fail "$c: rdzv_backend = $(conf $c rdzv_backend)"
  [[ "$(conf $c rdzv_endpoint)" =~ ^127\.0\.0\.1:(2[0-9]{4})\ \ .*NodeAddr ]] ||
    fail "$c: rdzv_endpoint = $(conf $c rdzv_endpoint) (expected n1's NodeAddr 127.0.0.1 and a port in 20000-29999)"
  e=$(conf $c rdzv_endpoint | cut -d' ' -f1)
  [ -z "$endpoint" ] || [ "$e" = "$endpoint" ] || fail "the nodes disagree on the endpoint: $endpoint vs $e"
  endpoint=$e
  [[ "$(conf $c run_id)" == "$JOB.1  "* ]] || fail "$c: run_id = $(conf $c run_id), expected $JOB.1 (step 1)"
  [ "$(conf $c nproc_per_node)" = "2  (SLURM_GPUS_ON_NODE)" ] || fail "$c: nproc_per_node = $(conf $c nproc_per_node)"
done
log "srun --ntasks-per-node=1 crun: 2 nodes, rendezvous $endpoint, node rank from SLURM_NODEID, 2 workers from SLURM_GPUS_ON_NODE"

# One node (a one-node step, or the batch script itself): a plain single-node run.
for c in config.one config.batch; do
  [[ "$(conf $c mode)" == "single-node  "* ]] || fail "$c: mode = $(conf $c mode): $(cat $c)"
  [ "$(conf $c nnodes | cut -d' ' -f1)" = 1 ] || fail "$c: nnodes = $(conf $c nnodes)"
done
log "one node (srun -N1, or the batch script): single-node mode"

# --slurm-tasks: 2 nodes x 2 tasks, each task one worker.
port=""
for t in 0 1 2 3; do
  f=tasks.$t
  [ "$(val $f RANK)" = $t ] || fail "$f: RANK=$(val $f RANK)"
  [ "$(val $f LOCAL_RANK)" = $((t % 2)) ] || fail "$f: LOCAL_RANK=$(val $f LOCAL_RANK)"
  [ "$(val $f WORLD_SIZE)" = 4 ] || fail "$f: WORLD_SIZE=$(val $f WORLD_SIZE)"
  [ "$(val $f LOCAL_WORLD_SIZE)" = 2 ] || fail "$f: LOCAL_WORLD_SIZE=$(val $f LOCAL_WORLD_SIZE)"
  [ "$(val $f GROUP_RANK)" = $((t / 2)) ] || fail "$f: GROUP_RANK=$(val $f GROUP_RANK)"
  [ "$(val $f MASTER_ADDR)" = 127.0.0.1 ] || fail "$f: MASTER_ADDR=$(val $f MASTER_ADDR)"
  [ "$(val $f TORCHELASTIC_RUN_ID)" = "$JOB.3" ] || fail "$f: TORCHELASTIC_RUN_ID=$(val $f TORCHELASTIC_RUN_ID)"
  [ "$(val $f TORCHELASTIC_RESTART_COUNT)" = 0 ] || fail "$f: TORCHELASTIC_RESTART_COUNT=$(val $f TORCHELASTIC_RESTART_COUNT)"
  p=$(val $f MASTER_PORT)
  [ "$p" -ge 20000 ] && [ "$p" -le 29999 ] || fail "$f: MASTER_PORT=$p, expected 20000-29999"
  [ -z "$port" ] || [ "$p" = "$port" ] || fail "the tasks disagree on MASTER_PORT: $port vs $p"
  port=$p
done
log "--slurm-tasks: RANK/LOCAL_RANK/GROUP_RANK from SLURM_PROCID/LOCALID/NODEID, WORLD_SIZE 4, master 127.0.0.1:$port"

# Two agents per node: refused with a line that says what to do.
[ "$(cat several.rc)" -ne 0 ] || fail "srun -n4 crun (two agents per node) succeeded"
grep -h 'crun: error' several.* | grep -q -- '--ntasks-per-node=1\|--slurm-tasks' ||
  fail "two agents per node: no error naming --ntasks-per-node=1 or --slurm-tasks: $(cat several.*)"
log "several agents per node: refused ($(grep -h 'crun: error' several.* | head -1))"
