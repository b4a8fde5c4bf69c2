"""ops/s of torch.distributed.TCPStore clients, driven from Python, against any TCPStore server
(torch's own, the anchor, or crun's store, which speaks the same protocol).

  tcpstore_bench.py serve            -> hosts a TCPStore on 127.0.0.1, prints its port, waits for stdin EOF
  tcpstore_bench.py --port P --op get|set|add --clients N --ops OPS
  tcpstore_bench.py --port P --op barrier --clients N
Clients are threads (TCPStore releases the GIL in its calls) with one TCPStore each, spread over
--procs forked processes.
Prints "<op> clients=<N> pipeline=0 ops_per_s=<X>" like store_bench; the barrier (every client
adds 1 to a counter, the last one sets "done", every client waits for "done") prints
"barrier clients=<N> seconds=<S>", timed from the release of all clients to the last one through.
"""
import argparse
import os
import socket
import sys
import threading
import resource
import time
import uuid
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


def raise_fd_limit():
    """torch 1.13 opens two connections per TCPStore: 1,024 clients need more than 1,024 fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def spread(args, connect):
    """Runs args.clients clients over min(args.procs, args.clients) processes (forked, so the
    GIL of one process does not serialise every client), threads inside each. connect(n, first)
    connects n clients and returns work(i) for each; all start together. Returns the seconds
    from the first start to the last finish (CLOCK_MONOTONIC is one clock for all processes)."""
    procs = max(1, min(args.procs, args.clients))
    share = [args.clients // procs + (1 if i < args.clients % procs else 0) for i in range(procs)]
    go_r, go_w = os.pipe()
    kids = []
    for i, n in enumerate(share):
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(rd)
                os.close(go_w)
                work = connect(n, sum(share[:i]))
                gate = threading.Barrier(n + 1)
                errors = []

                def run(j):
                    gate.wait()
                    try:
                        work(j)
                    except Exception as e:  # noqa: BLE001
                        errors.append(repr(e))

                threads = [threading.Thread(target=run, args=(j,)) for j in range(n)]
                for t in threads:
                    t.start()
                os.write(wr, b"R")
                os.read(go_r, 1)  # EOF: the parent let everyone go
                t0 = time.monotonic()
                gate.wait()
                for t in threads:
                    t.join()
                t1 = time.monotonic()
                if errors:
                    sys.stderr.write(f"client failed: {errors[:3]}\n")
                else:
                    os.write(wr, f"{t0} {t1}\n".encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(wr)
        kids.append((pid, rd))
    os.close(go_r)
    for _, rd in kids:
        if os.read(rd, 1) != b"R":
            sys.exit("a client process failed to connect")
    os.close(go_w)
    spans = []
    for pid, rd in kids:
        line = os.read(rd, 200).decode().split()
        os.waitpid(pid, 0)
        if len(line) != 2:
            sys.exit("a client process failed")
        spans.append((float(line[0]), float(line[1])))
    return max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)


def connect_clients(args, n):
    return [dist.TCPStore("127.0.0.1", args.port, is_master=False, timeout=timedelta(seconds=120)) for _ in range(n)]


def barrier(args):
    run = uuid.uuid4().hex  # fresh keys on a server that serves several runs

    def connect(n, first):
        stores = connect_clients(args, n)

        def work(j):
            s = stores[j]
            if s.add(f"{run}/count", 1) == args.clients:
                s.set(f"{run}/done", "1")
            s.wait([f"{run}/done"])
        return work

    secs = spread(args, connect)
    print(f"barrier clients={args.clients} seconds={secs:.4f}")


def bench(args):
    value = b"v" * 32

    def connect(n, first):
        stores = connect_clients(args, n)
        for j, s in enumerate(stores):
            s.set(f"bench/key{first + j}", value)

        def work(j):
            s, key, ctr = stores[j], f"bench/key{first + j}", f"bench/ctr{first + j}"
            if args.op == "set":
                for _ in range(args.ops):
                    s.set(key, value)
            elif args.op == "get":
                for _ in range(args.ops):
                    s.get(key)
            else:
                for _ in range(args.ops):
                    s.add(ctr, 1)
        return work

    secs = spread(args, connect)
    print(f"{args.op} clients={args.clients} pipeline=0 ops_per_s={args.ops * args.clients / secs:.0f}")


if __name__ == "__main__":
    raise_fd_limit()
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    else:
        p = argparse.ArgumentParser()
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--op", choices=["set", "get", "add", "barrier"], default="get")
        p.add_argument("--clients", type=int, default=1)
        p.add_argument("--ops", type=int, default=20000, help="per client")
        p.add_argument("--procs", type=int, default=1, help="client processes (threads inside each)")
        a = p.parse_args()
        barrier(a) if a.op == "barrier" else bench(a)
