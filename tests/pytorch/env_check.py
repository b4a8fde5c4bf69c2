# The worker environment as torch.distributed sees it. --init env: init_process_group with
# init_method="env://"; --init default: no init_method (torch falls back to env://). Checks that
# torch's rank and world size are the launcher's, all-reduces once, then prints every launcher
# variable; values that differ between runs by design are replaced by what they must satisfy:
#   MASTER_ADDR            -> "loopback" when it resolves to loopback addresses only
#   MASTER_PORT            -> "same-on-all-ranks" (a port, the same for every rank)
#   TORCHELASTIC_RUN_ID    -> "same-on-all-ranks" (non-empty, the same for every rank)
#   TORCHELASTIC_ERROR_FILE-> its tail "attempt_N/LOCAL_RANK/error.json", whether its folder
#                             exists and whether the file is absent at start
# and, last, the names of all variables in the worker's environment (run_case.py compares them).
import argparse
import os
import socket

import torch
import torch.distributed as dist

from common import env_int, result

PLAIN = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
         "NCCL_ASYNC_ERROR_HANDLING"]


def is_loopback(host):
    addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    return all(a.startswith("127.") or a == "::1" for a in addrs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", choices=["env", "default"], required=True)
    args = p.parse_args()
    if args.init == "env":
        dist.init_process_group("gloo", init_method="env://")
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == env_int("RANK") and world == env_int("WORLD_SIZE"), (rank, world)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t.item()

    env = os.environ
    for key in PLAIN:
        result(rank=rank, key=key, value=env.get(key, "<unset>"))
    shared = [None] * world
    dist.all_gather_object(shared, (env["MASTER_ADDR"], env["MASTER_PORT"], env["TORCHELASTIC_RUN_ID"]))
    uniform = all(s == shared[0] for s in shared)
    port = int(env["MASTER_PORT"])
    result(rank=rank, key="MASTER_ADDR", value="loopback" if is_loopback(env["MASTER_ADDR"]) else env["MASTER_ADDR"])
    result(rank=rank, key="MASTER_PORT", value="same-on-all-ranks" if uniform and 0 < port < 65536 else port)
    run_id = env["TORCHELASTIC_RUN_ID"]
    result(rank=rank, key="TORCHELASTIC_RUN_ID", value="same-on-all-ranks" if uniform and run_id else run_id)
    error_file = env["TORCHELASTIC_ERROR_FILE"]
    tail = "/".join(error_file.split("/")[-3:])
    result(rank=rank, key="TORCHELASTIC_ERROR_FILE", value=tail,
           folder_exists=os.path.isdir(os.path.dirname(error_file)), absent=not os.path.exists(error_file))
    result(rank=rank, key="ALL_NAMES", value=",".join(sorted(env)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
