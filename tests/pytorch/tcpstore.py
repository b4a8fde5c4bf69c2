# Direct TCPStore use at the launcher's MASTER_ADDR:MASTER_PORT: rank 0 hosts the store there (so
# the port must be free when the workers start), or, with TORCHELASTIC_USE_AGENT_STORE=True, the
# agent's store is there already; every rank connects; set/get/add/wait/
# compare_set across ranks, then a gloo group built on the same store all-reduces once.
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from common import env_int, result


def main():
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    # Under the agent's store (TORCHELASTIC_USE_AGENT_STORE=True) it is there already: no rank hosts.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], env_int("MASTER_PORT"), world,
                          is_master=(rank == 0 and not agent_store), timeout=timedelta(seconds=60))
    store.set(f"hello/{rank}", f"from rank {rank}")
    store.add("counter", rank + 1)           # every rank adds: 1 + 2 + ... + world
    store.set(f"added/{rank}", "1")
    store.wait([f"added/{r}" for r in range(world)])  # every rank's set and add are done
    peers = [store.get(f"hello/{r}").decode() for r in range(world)]
    total = store.add("counter", 0)
    # Exactly one rank wins the compare-and-set of a fresh key; everybody reads the winner.
    store.compare_set("winner", "", str(rank))
    store.set(f"tried/{rank}", "1")
    store.wait([f"tried/{r}" for r in range(world)])
    winner_is_a_rank = store.get("winner").decode() in {str(r) for r in range(world)}
    result(rank=rank, peers="|".join(peers), counter=total, one_winner=winner_is_a_rank)

    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=world)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    result(rank=rank, all_reduce=t.item())
    dist.destroy_process_group()
    # The host (rank 0) keeps the store up until every rank has finished with it.
    store.set(f"done/{rank}", "1")
    if rank == 0 and not agent_store:
        store.wait([f"done/{r}" for r in range(world)])


if __name__ == "__main__":
    main()
