# A PyTorch worker that asks crun for something through CRUN_CONTROL_FILE, with the two lines of
# Python README.md shows. Both ranks join a gloo group and all-reduce once; then rank REQUEST_RANK
# appends "VERB REASON" and exits EXIT_CODE (os._exit: see record_fail.py), the other waits until
# crun stops it. Arguments: VERB REASON EXIT_CODE REQUEST_RANK.
import os
import sys
import threading

import torch
import torch.distributed as dist

verb, reason, exit_code, request_rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dist.init_process_group("gloo", init_method="env://")
t = torch.ones(1)
dist.all_reduce(t)
print(f"START rank={dist.get_rank()} restart={os.environ['TORCHELASTIC_RESTART_COUNT']} sum={t.item()}", flush=True)
if dist.get_rank() == request_rank:
    with open(os.environ["CRUN_CONTROL_FILE"], "a") as f:
        f.write(f"{verb} {reason}\n")
    os._exit(exit_code)
threading.Event().wait(120)  # bounded: crun stops this rank once the other has exited
