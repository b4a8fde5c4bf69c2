#!/usr/bin/python3
"""PyTorch DDP example for crun (and torchrun, unchanged).

    crun --standalone --nproc-per-node 2 examples/pytorch_ddp.py --checkpoint-dir /tmp/ddp
    torchrun --standalone --nproc-per-node 2 examples/pytorch_ddp.py --checkpoint-dir /tmp/ddp

What it shows:
  - init from the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo on CPU;
  - a synthetic Gaussian-mixture classification set made from a seed (same on every rank);
  - DistributedSampler with set_epoch() for per-rank shards;
  - DistributedDataParallel averaging gradients;
  - checkpoint save (rank 0, temp file + rename) and load keyed on TORCHELASTIC_RESTART_COUNT:
    a restarted attempt (count > 0) resumes from the latest checkpoint;
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


def save(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--checkpoint-dir", default="")
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
    ckpt = os.path.join(args.checkpoint_dir, "ddp_checkpoint.pt") if args.checkpoint_dir else ""
    if ckpt and restart > 0 and os.path.exists(ckpt):
        state = torch.load(ckpt, map_location="cpu")
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
            if ckpt:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                save(ckpt, {"model": model.module.state_dict(), "opt": opt.state_dict(), "epoch": epoch})
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
