# PyTorch smoke test for crun: gloo over env:// (MASTER_ADDR/PORT, RANK, WORLD_SIZE from crun).
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
world = dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert t.item() == expected, (t.item(), expected)
dist.barrier()
print(f"smoke ok rank={rank} world={world} sum={t.item():g}", flush=True)
dist.destroy_process_group()
