"""torch's elastic file timer, unchanged: every rank opens a 2 s scope around its "step"; on the
first attempt rank 1 overstays it (it sleeps far past the deadline), so the launcher's timer server
must kill it and the group restarts. Prints RESULT lines for the steps that completed."""
import os
import time

import torch.distributed.elastic.timer as timer

import common  # noqa: F401  (says which store the worker was given)

rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
with timer.expires(after=2, scope="step"):
    if rank == 1 and restart == 0:
        time.sleep(100)  # far beyond the run's bound: only the timer ends it
print(f"RESULT kind=step rank={rank} restart={restart}", flush=True)
