#!/usr/bin/python3
"""worker_runtime benchmarks, side by side in one run (run with /usr/bin/python3: it has torch).

1. all_reduce bus bandwidth, 2 ranks on loopback, float32 sum, 4 KiB .. 256 MiB:
   crun::runtime (default path) vs torch.distributed gloo, median of >= 5 each, ratio.
   Also crun's Gloo paths forced one by one at 64 MiB, to show the choice.
2. train_mlp samples/s with 1 and 2 ranks (scaling).

Usage: /usr/bin/python3 bench/runtime/run_bench.py [--build build-runtime]
"""
import argparse, os, re, socket, statistics, subprocess, sys, time

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_ranks(cmd, world, timeout=600, env=None):
    port = free_port()
    procs = []
    for r in range(world):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_RESTART_COUNT="0",
                   OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, o in zip(procs, outs):
        if p.returncode != 0:
            sys.exit("rank failed (%s):\n%s" % (" ".join(cmd), o))
    return outs[0]


def parse(out):
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"size=(\d+) median_s=([\d.]+) busbw_gbs=([\d.]+)", out)}


def torch_worker(sizes):
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    w = dist.get_world_size()
    for b in sizes:
        t = torch.ones(b // 4, dtype=torch.float32)
        iters = max(5, min(50, (256 << 20) // b))
        for _ in range(2):
            dist.all_reduce(t)
        ts = []
        for _ in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            ts.append(time.perf_counter() - t0)
        med = statistics.median(ts)
        if dist.get_rank() == 0:
            print("size=%d median_s=%.6f busbw_gbs=%.3f iters=%d" % (b, med, b * 2 * (w - 1) / w / med / 1e9, iters),
                  flush=True)
    dist.destroy_process_group()


def human(b):
    return "%d KiB" % (b >> 10) if b < (1 << 20) else "%d MiB" % (b >> 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build-runtime"))
    ap.add_argument("--torch-worker", action="store_true")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.torch_worker:
        return torch_worker(sizes)
    worker = os.path.join(a.build, "bench", "runtime", "bench_allreduce_worker")
    train = os.path.join(a.build, "examples", "train_mlp", "train_mlp")
    crun = parse(run_ranks([worker, "auto"] + [str(s) for s in sizes], 2))
    torch = parse(run_ranks(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                             "--sizes", a.sizes], 2))
    print("all_reduce float32 sum, 2 ranks, loopback; bus bandwidth GB/s (median)")
    print("%-8s %12s %12s %8s" % ("size", "crun", "torch-gloo", "ratio"))
    for s in sizes:
        c, t = crun[s][1], torch[s][1]
        print("%-8s %12.3f %12.3f %8.2f" % (human(s), c, t, c / t if t else float("nan")))
    s64 = 64 << 20
    print("\ncrun Gloo paths at 64 MiB (GB/s):")
    for algo, seg in (("auto", None), ("ring_chunked", None), ("ring", None), ("gloo_allreduce", "1048576"),
                      ("gloo_allreduce", "4194304")):
        env = {"CRUN_BENCH_SEGMENT_BYTES": seg} if seg else {}
        r = parse(run_ranks([worker, algo, str(s64)], 2, env=env))
        print("  %-15s %-14s %.3f" % (algo, "segment=" + seg if seg else "", r[s64][1]))

    print("\ntrain_mlp samples/s (median of 3)")
    configs = [("defaults (hidden 512, batch 256)", []),
               ("hidden=128 batch=32", ["--hidden", "128", "--batch-size", "32"]),
               ("hidden=1024 batch=256", ["--hidden", "1024", "--batch-size", "256", "--epochs", "2"])]
    for name, extra in configs:
        rates = {}
        for world in (1, 2):
            vals = []
            for _ in range(3):
                out = run_ranks([train] + extra, world)
                vals.append(float(re.search(r"samples_per_sec=([\d.]+)", out).group(1)))
            rates[world] = statistics.median(vals)
        print("  %-34s 1 rank %9.0f   2 ranks %9.0f   scaling %.2fx" % (name, rates[1], rates[2], rates[2] / rates[1]))


if __name__ == "__main__":
    main()
