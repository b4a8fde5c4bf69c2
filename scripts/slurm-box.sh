#!/usr/bin/env bash
# A real Slurm on loopback for tests: munged, slurmctld and two slurmd (nodes n1, n2), all
# started by this script as plain processes and stopped by their pids.
#
#   slurm-box.sh start DIR    writes DIR/slurm.conf, starts the daemons, waits until both nodes
#                             are idle (bounded), prints "export SLURM_CONF=DIR/slurm.conf"
#   slurm-box.sh stop DIR     cancels the jobs still on the box, stops every daemon it started (by
#                             pid) and removes DIR
#
# Ports come from a base derived from DIR so two boxes on one machine do not collide. Needs root
# and Debian's slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh).
#
# Tuned for tests (Slurm 22.05's defaults would make them wait on timers):
#   - cred_expire=5 (the minimum): a requeued job's BeginTime is requeue + cred_expire + 1, i.e.
#     6 s instead of 121 s.
#   - batch_sched_delay=0, sched_interval=1: a submitted job starts within about a second, and a
#     requeued one right after its BeginTime (the default full pass runs every 60 s).
#   - Each node has two "GPUs" (gres/gpu over empty files in DIR/dev), so --gpus-per-node=2 sets
#     SLURM_GPUS_ON_NODE as on a GPU cluster; nothing uses them as devices (slurmd logs that they
#     are not device files, and sets no CUDA_VISIBLE_DEVICES).
set -euo pipefail
die() { echo "slurm-box: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: $0 start|stop DIR"
cmd=$1 dir=$2

# The pid files' processes, if they are still this box's daemons (their command lines name DIR;
# a stale pid file must not make us kill an unrelated process that reuses the pid).
box_pids() {
  for f in "$dir"/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/" && echo "$pid"
  done
  return 0
}

stop_pids() {
  pids=$(box_pids)
  for pid in $pids; do kill "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done  # bounded: 5 s
    kill -9 "$pid" 2>/dev/null || true
  done
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    host=$(hostname -s)
    # 30000-32699: below Linux's ephemeral ports (32768-) and outside 20000-29999, where crun derives
    # its rendezvous and MASTER_PORT from the job id.
    base=$(( 30000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 2700 ))
    mkdir -p "$dir/state" "$dir/spool/n1" "$dir/spool/n2" "$dir/munge"
    chmod 700 "$dir/munge"
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" --force
    cat > "$dir/slurm.conf" <<CONF
ClusterName=crunbox
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
SchedulerParameters=batch_sched_delay=0,sched_interval=1
GresTypes=gpu
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 1)) CPUs=2 Gres=gpu:2 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=2 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    mkdir -p "$dir/dev"
    touch "$dir/dev/nvidia0" "$dir/dev/nvidia1"
    echo "Name=gpu File=$dir/dev/nvidia[0-1]" > "$dir/gres.conf"
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -i -f "$SLURM_CONF"
    slurmd -N n1 -f "$SLURM_CONF"
    slurmd -N n2 -f "$SLURM_CONF"
    for _ in $(seq 200); do  # bounded: 20 s
      idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c idle || true)
      [ "$idle" -ge 2 ] && break
      sleep 0.1
    done
    [ "${idle:-0}" -ge 2 ] || { sinfo -N 2>&1 >&2 || true; tail -n 5 "$dir"/*.log >&2 || true; stop_pids; die "nodes did not become idle"; }
    echo "export SLURM_CONF=$dir/slurm.conf"
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    # Jobs still on the box first: slurmstepd and the jobs' processes outlive slurmd, so cancel
    # them through Slurm while it runs and wait (bounded: 15 s, polling, since Slurm has no event
    # for it) until none is left.
    if [ -f "$dir/slurm.conf" ] && [ -n "$(box_pids)" ]; then
      export SLURM_CONF="$dir/slurm.conf"
      jobs=$(squeue -h -o %i 2>/dev/null || true)
      if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086  # one job id per word
        scancel $jobs 2>/dev/null || true
        for _ in $(seq 150); do
          [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break
          sleep 0.1
        done
      fi
    fi
    stop_pids
    rm -rf "$dir"
    ;;
  *) die "unknown command '$cmd'" ;;
esac
