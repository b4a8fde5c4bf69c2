"""torch's elastic file timer, unchanged: every rank opens a 2 s scope around its "step"; on the
first attempt rank 1 overstays it (it sleeps far past the deadline), so the launcher's timer server
must kill it and the group restarts. Prints RESULT lines for the steps that completed."""
import os
import time

import torch.distributed.elastic.timer as timer

import common  # says which store the worker was given; result() writes a line in one write(2)

rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
with timer.expires(after=2, scope="step"):
    if rank == 1 and restart == 0:
        time.sleep(100)  # far beyond the run's bound: only the timer ends it
# One write per line (common.result): under torchrun both ranks share one stdout pipe, and print()
# writes the text and its newline apart, so two ranks' lines could run together (CI saw
# "RESULT kind=step rank=1 restart=1RESULT kind=step rank=0 restart=1").
common.result(kind="step", rank=rank, restart=restart)
