# A failing worker under torch's @record: both ranks join a gloo group and all-reduce once, then
# rank 1 raises. @record writes the exception to TORCHELASTIC_ERROR_FILE; the launcher must name
# rank 1 as the root cause with that message. The script exits 3 (not Python's 1) so that the
# launchers' exit codes show whose code they pass on. Rank 0 idles until the launcher stops it.
import os
import threading

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from common import result


@record
def main():
    dist.init_process_group("gloo", init_method="env://")
    t = torch.ones(1)
    dist.all_reduce(t)
    result(kind="before_failure", rank=dist.get_rank(), sum=t.item())
    if dist.get_rank() == 1:
        raise RuntimeError("boom from rank 1 after the first all_reduce")
    threading.Event().wait(120)  # bounded: the launcher stops this rank once rank 1 has failed


if __name__ == "__main__":
    try:
        main()
    except RuntimeError:
        # os._exit, not sys.exit: torch 1.13 sometimes aborts (SIGABRT, "terminate called without
        # an active exception") when the interpreter tears down a live gloo group.
        os._exit(3)
