# DDP + DistributedSampler on gloo/CPU, fully seeded, so every launcher must give bit-identical
# weights. Prints RESULT lines: the start (restart count, first epoch), the sampler split
# (disjoint shards covering the data set), each epoch's mean loss (rank 0) and every rank's final
# weights hash.
#   --ckpt DIR           rank 0 checkpoints after every epoch; when TORCHELASTIC_RESTART_COUNT > 0
#                        the group resumes from that checkpoint (it must exist).
#   --crash-rank R --crash-epoch E
#                        rank R dies (exit 13) in the middle of epoch E, only in restart 0.
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from common import env_int, result, weights_hash

EPOCHS = 4
CRASH_STEP = 3  # > 0: the epoch's first all-reduces happened, so the last checkpoint is on disk


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt")
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-epoch", type=int, default=-1)
    args = p.parse_args()

    torch.set_num_threads(1)  # the same arithmetic whatever OMP_NUM_THREADS says
    dist.init_process_group("gloo")  # no init_method: env:// from the launcher's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = env_int("TORCHELASTIC_RESTART_COUNT")

    gen = torch.Generator().manual_seed(1234)  # a fixed regression problem
    x = torch.randn(256, 8, generator=gen)
    y = x @ torch.randn(8, 1, generator=gen) + 0.1 * torch.randn(256, 1, generator=gen)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=16, sampler=sampler)

    # The sampler gives each rank its own shard: disjoint, and together the whole data set.
    sampler.set_epoch(0)
    shards = [None] * world
    dist.all_gather_object(shards, list(sampler))
    flat = [i for s in shards for i in s]
    result(kind="sampler", rank=rank, shard=len(shards[rank]),
           disjoint_cover=sorted(flat) == list(range(len(data))))

    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch = 0
    ckpt = os.path.join(args.ckpt, "ckpt.pt") if args.ckpt else None
    if restart > 0:  # a restarted group resumes where the last checkpoint left off
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch = state["epoch"] + 1
    ddp = DDP(model)
    result(kind="start", rank=rank, world=world, restart=restart, start_epoch=start_epoch)

    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        total = torch.zeros(1, dtype=torch.float64)
        steps = 0
        for step, (xb, yb) in enumerate(loader):
            if restart == 0 and rank == args.crash_rank and epoch == args.crash_epoch and step == CRASH_STEP:
                print(f"rank {rank}: crashing on purpose in epoch {epoch}, step {step}", file=sys.stderr, flush=True)
                os._exit(13)
            opt.zero_grad()
            loss = F.mse_loss(ddp(xb), yb)
            loss.backward()  # DDP averages the gradients across ranks here
            opt.step()
            total += loss.item()
            steps += 1
        dist.all_reduce(total)
        if rank == 0:
            result(kind="epoch", epoch=epoch, loss=(total.item() / (world * steps)).hex())
            if ckpt:  # atomically: a crash never leaves half a checkpoint
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)

    result(kind="final", rank=rank, weights=weights_hash(model))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
