#!/usr/bin/python3
"""PyTorch DDP example for crun (and torchrun, unchanged).

    crun --standalone --nproc-per-node 2 --max-restarts 1 examples/pytorch_ddp.py --fail-at-epoch 2
    torchrun --standalone --nproc-per-node 2 examples/pytorch_ddp.py --checkpoint-dir /tmp/ddp

What it shows:
  - init from the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo on CPU;
  - a synthetic Gaussian-mixture classification set made from a seed (same on every rank);
  - DistributedSampler with set_epoch() for per-rank shards;
  - DistributedDataParallel averaging gradients;
  - checkpoints: under crun, by default each rank saves its own copy into its CRUN_STATE_DIR
    (kept by crun across restarts, on /dev/shm): torch.save to a dot-name, then os.replace, which
    is the commit (a half-written dot-file is never restored), no fsync needed; with
    --checkpoint-dir DIR (a shared, durable directory) rank 0 saves there, with an fsync. A
    restarted attempt (TORCHELASTIC_RESTART_COUNT > 0) resumes from the newest epoch any rank holds;
  - failure injection (--fail-at-epoch, first attempt only) to see crun restart the group;
  - distributed evaluation: loss / correct / total summed to rank 0 with all_reduce.
Ends on rank 0 with: final: accuracy=<0..1>
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_data(seed, n_train=8000, n_test=2000, dim=32, classes=10, clusters=3):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes * clusters, dim, generator=g)

    def draw(n):
        blob = torch.randint(0, classes * clusters, (n,), generator=g)
        x = centers[blob] + 0.6 * torch.randn(n, dim, generator=g)
        return TensorDataset(x, blob % classes)

    return draw(n_train), draw(n_test)


def save(path, state, durable):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")  # a dot-name
    torch.save(state, tmp)
    if durable:  # a disk; CRUN_STATE_DIR is memory that crun keeps, the rename is enough there
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    os.replace(tmp, path)  # the commit


def load_agreed(path, rank):
    """Every rank's newest epoch; the lowest rank holding the group's newest sends it to all."""
    state = torch.load(path, map_location="cpu") if os.path.exists(path) else None
    mine = torch.tensor([state["epoch"] if state else -1])
    newest = mine.clone()
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    if newest.item() < 0:
        return None
    holder = torch.tensor([rank if mine.item() == newest.item() else dist.get_world_size()])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [state]
    dist.broadcast_object_list(box, src=holder.item())
    return box[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--checkpoint-dir", default="", help="shared directory (default: each rank's CRUN_STATE_DIR)")
    ap.add_argument("--fail-at-epoch", type=int, default=-1)
    ap.add_argument("--fail-rank", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    train, test = make_data(args.seed)
    torch.manual_seed(args.seed)
    model = DDP(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start_epoch = 0
    ckpt_dir = args.checkpoint_dir or os.environ.get("CRUN_STATE_DIR", "")
    per_rank = not args.checkpoint_dir  # CRUN_STATE_DIR: every rank its own copy
    ckpt = os.path.join(ckpt_dir, "ddp_checkpoint.pt") if ckpt_dir else ""
    state = load_agreed(ckpt, rank) if ckpt and restart > 0 else None
    if state:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch = state["epoch"] + 1
        if rank == 0:
            print(f"restart {restart}: resumed from {ckpt} at epoch {start_epoch}", flush=True)

    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, args.epochs):
        if restart == 0 and epoch == args.fail_at_epoch and rank == args.fail_rank:
            raise SystemExit(f"pytorch_ddp: injected failure at epoch {epoch} on rank {rank}")
        sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        if rank == 0:
            print(f"epoch {epoch}: train_loss={total / max(1, len(loader)):.4f}", flush=True)
        if ckpt and (per_rank or rank == 0):
            os.makedirs(ckpt_dir, exist_ok=True)
            save(ckpt, {"model": model.module.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, not per_rank)
        dist.barrier()  # nobody runs ahead of the checkpoint

    # Distributed evaluation: each rank scores its shard, sums go to every rank (rank 0 prints).
    model.eval()
    eval_sampler = DistributedSampler(test, num_replicas=world, rank=rank, shuffle=False)
    stats = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=256, sampler=eval_sampler):
            out = model(x)
            stats[0] += loss_fn(out, y).item() * len(y)
            stats[1] += (out.argmax(1) == y).sum().item()
            stats[2] += len(y)
    dist.all_reduce(stats)
    if rank == 0:
        print(f"eval: loss={stats[0] / stats[2]:.4f}", flush=True)
        print(f"final: accuracy={stats[1] / stats[2]:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
