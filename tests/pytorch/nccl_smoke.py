# A PyTorch worker on one GPU per local rank, for scripts/gpu-check.sh (needs CUDA; not in the
# suite, whose machines have no GPU). Under crun: env:// with the nccl backend, the device from
# LOCAL_RANK, an all_reduce and a broadcast on device tensors checked against their known values,
# a barrier, and one "RESULT" line per rank.
import os

import torch
import torch.distributed as dist


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"]), (rank, world)
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    assert torch.all(x == want).item(), (x[0].item(), want)
    y = torch.full((16,), 7.0 if rank == 0 else 0.0, device="cuda")
    dist.broadcast(y, src=0)
    assert torch.all(y == 7.0).item()
    dist.barrier()
    print(f"RESULT nccl rank={rank} world={world} device={torch.cuda.get_device_name(local_rank)} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
