#!/bin/bash
# The slurm_box CTest fixture: `box_fixture.sh start DIR` starts one Slurm box (munged, slurmctld,
# slurmd n1 and n2 on 127.0.0.1, scripts/slurm-box.sh) for all the Slurm tests; `stop DIR` cancels
# what is left on it and stops its daemons by pid. A missing prerequisite fails with the way to
# install it.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 start|stop DIR SOURCE_DIR" >&2; exit 2; }
cmd=$1 dir=$2 src=$3
PATH="$PATH:/usr/sbin:/sbin"
missing=()
for c in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "FAIL: Slurm is not installed (missing: ${missing[*]}); run scripts/install-deps.sh" \
    "(it installs slurmctld slurmd slurm-client munge)" >&2
  exit 1
fi
[ "$(id -u)" -eq 0 ] || { echo "FAIL: the Slurm box needs root (munged, slurmctld and slurmd run as root)" >&2; exit 1; }
case $cmd in
  start)
    # A box left by an interrupted run (its cleanup never ran) goes first.
    "$src/scripts/slurm-box.sh" stop "$dir"
    "$src/scripts/slurm-box.sh" start "$dir"
    SLURM_CONF="$dir/slurm.conf" sinfo -N -o '%N %t %G %c'
    ;;
  stop) "$src/scripts/slurm-box.sh" stop "$dir" ;;
  *) echo "usage: $0 start|stop DIR SOURCE_DIR" >&2; exit 2 ;;
esac
