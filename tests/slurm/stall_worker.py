"""A worker for the Slurm no-progress test: it beats up to step 5 through CRUN_HEARTBEAT_FILE
(the two documented lines, no library) and fails, in every attempt: the restarts never get past
step 5, so crun must stop with exit 8 instead of restarting on."""
import mmap
import os
import struct
import time

hb = mmap.mmap(os.open(os.environ["CRUN_HEARTBEAT_FILE"], os.O_RDWR), 16)
for step in range(6):
    hb[:] = struct.pack("=qq", step, time.monotonic_ns())
print(f"stalled rank={os.environ['RANK']} restart={os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
raise SystemExit(1)
