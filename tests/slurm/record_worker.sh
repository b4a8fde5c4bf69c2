#!/bin/sh
# A worker for the Slurm tests, run by crun (or by srun through crun --slurm-tasks): it records the
# environment it was started with in $RECORD_DIR/slurm<SLURM_RESTART_COUNT>.crun<TORCHELASTIC_RESTART_COUNT>.rank<RANK>,
# then becomes train_mlp ($TRAIN_MLP) with its arguments.
set -eu
f="$RECORD_DIR/slurm${SLURM_RESTART_COUNT:-0}.crun${TORCHELASTIC_RESTART_COUNT:-none}.rank${RANK:-none}"
env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_[A-Z_]*|SLURMD_NODENAME|SLURM_RESTART_COUNT|SLURM_PROCID|SLURM_LOCALID|SLURM_NODEID|SLURM_GPUS_ON_NODE|SLURM_JOB_ID)=' \
  | sort > "$f.tmp"
mv "$f.tmp" "$f"
exec "$TRAIN_MLP" "$@"
