"""ops/s of torch.distributed.TCPStore (the anchor), driven from Python.

  tcpstore_bench.py serve            -> hosts a TCPStore on 127.0.0.1, prints its port, waits for stdin EOF
  tcpstore_bench.py --port P --op get|set|add --clients N --ops OPS
Clients are threads (TCPStore releases the GIL in its calls) with one TCPStore each.
Prints "<op> clients=<N> pipeline=0 ops_per_s=<X>" like store_bench.
"""
import argparse
import socket
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def serve():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    print(port, flush=True)
    sys.stdin.read()
    del store


def bench(args):
    stores = [dist.TCPStore("127.0.0.1", args.port, is_master=False, timeout=timedelta(seconds=60))
              for _ in range(args.clients)]
    value = b"v" * 32
    for i, s in enumerate(stores):
        s.set(f"bench/key{i}", value)
    barrier = threading.Barrier(args.clients + 1)

    def work(i):
        s = stores[i]
        key = f"bench/key{i}"
        ctr = f"bench/ctr{i}"
        barrier.wait()
        if args.op == "set":
            for _ in range(args.ops):
                s.set(key, value)
        elif args.op == "get":
            for _ in range(args.ops):
                s.get(key)
        else:
            for _ in range(args.ops):
                s.add(ctr, 1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    print(f"{args.op} clients={args.clients} pipeline=0 ops_per_s={args.ops * args.clients / secs:.0f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    else:
        p = argparse.ArgumentParser()
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--op", choices=["set", "get", "add"], default="get")
        p.add_argument("--clients", type=int, default=1)
        p.add_argument("--ops", type=int, default=20000)
        bench(p.parse_args())
